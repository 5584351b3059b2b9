package admin

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// The codes of the admin plane's refusals: the stable "code" of the JSON
// body {"code", "reason"} every operator endpoint answers an error with.
const (
	// CodeOperatorAuthOff (403): no tokens file is configured, or it cannot
	// be read or parsed; the reason says which and names
	// SEQFLOW_ADMIN_TOKENS_FILE. No token can help.
	CodeOperatorAuthOff = "operator_auth_off"
	// CodeUnauthenticated (401): no Authorization: Bearer header, or a
	// token that matches none in the file.
	CodeUnauthenticated = "unauthenticated"
	// CodeUnsupportedMediaType (415): a request with a body that is not
	// Content-Type: application/json (a form post, text/plain).
	CodeUnsupportedMediaType = "unsupported_media_type"
	// CodeBadRequest (400): the body is not the JSON object the endpoint
	// takes (invalid JSON, an unknown or repeated member, a missing value).
	CodeBadRequest = "bad_request"
	// CodeTooLarge (413): the body is over MaxBodyBytes.
	CodeTooLarge = "too_large"
	// CodeUnavailable (503): the endpoint's work failed for a reason that
	// may pass; running it again is safe.
	CodeUnavailable = "unavailable"
)

// Error is an operator endpoint's refusal.
type Error struct {
	Status int    // HTTP status
	Code   string // one of the Code constants
	Reason string // for a human
}

func (e *Error) Error() string { return fmt.Sprintf("%s (%d): %s", e.Code, e.Status, e.Reason) }

// WriteError answers e as JSON {"code", "reason"}.
func WriteError(w http.ResponseWriter, e *Error) {
	if e.Status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="seqflow-admin"`)
	}
	WriteJSON(w, e.Status, struct {
		Code   string `json:"code"`
		Reason string `json:"reason"`
	}{e.Code, e.Reason})
}

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false) // a reason reads "Bearer <token>"; nosniff keeps browsers from rendering it
	_ = enc.Encode(v)
}
