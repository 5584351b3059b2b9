// Package apierr is the one registry of client-facing errors: for every
// imv1.ErrorCode a stable snake_case name, a default message, whether a
// retry of the same request can succeed, and the HTTP status and WebSocket
// close code it maps to. Gateways build every error frame and response
// from here so a client can act on the code alone.
package apierr

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// Entry is what the registry knows about one code.
type Entry struct {
	// Message is the default text shown when the error carries no detail.
	Message string
	// Retryable says whether sending the same request again (same
	// client_msg_id) can succeed without the client changing anything.
	Retryable bool
	// HTTPStatus is the status of an HTTP response carrying the error.
	HTTPStatus int
}

var registry = map[imv1.ErrorCode]Entry{
	imv1.ErrorCode_ERROR_CODE_UNSPECIFIED: {"unspecified error", false, http.StatusInternalServerError},

	imv1.ErrorCode_ERROR_CODE_BAD_FRAME:       {"the frame is not valid JSON of a known shape", false, http.StatusBadRequest},
	imv1.ErrorCode_ERROR_CODE_MISSING_FIELD:   {"a required field is missing", false, http.StatusBadRequest},
	imv1.ErrorCode_ERROR_CODE_INVALID_UTF8:    {"a text field is not valid UTF-8", false, http.StatusBadRequest},
	imv1.ErrorCode_ERROR_CODE_UNKNOWN_TYPE:    {"unknown frame or message type", false, http.StatusBadRequest},
	imv1.ErrorCode_ERROR_CODE_TOO_LARGE:       {"a field is over its size limit", false, http.StatusRequestEntityTooLarge},
	imv1.ErrorCode_ERROR_CODE_INVALID_FIELD:   {"a field has an invalid value", false, http.StatusBadRequest},
	imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON:  {"the frame is JSON that parsers read differently (a repeated key, a key that differs from a field only in case, a lone surrogate)", false, http.StatusBadRequest},
	imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED: {"missing or invalid bearer token", false, http.StatusUnauthorized},
	imv1.ErrorCode_ERROR_CODE_TOKEN_EXPIRED:   {"the bearer token has expired; get a new one", false, http.StatusUnauthorized},
	imv1.ErrorCode_ERROR_CODE_FORBIDDEN:       {"not allowed", false, http.StatusForbidden},
	imv1.ErrorCode_ERROR_CODE_SIGNED_OUT:      {"this device was signed out; sign in again for a new token", false, http.StatusUnauthorized},

	imv1.ErrorCode_ERROR_CODE_RATE_LIMITED:       {"too many requests; slow down and retry later", true, http.StatusTooManyRequests},
	imv1.ErrorCode_ERROR_CODE_TOO_MANY_IN_FLIGHT: {"too many sends awaiting their ACK on this connection; retry after one completes", true, http.StatusTooManyRequests},
	imv1.ErrorCode_ERROR_CODE_FRAME_TOO_LARGE:    {"the frame is over the gateway's frame size limit", false, http.StatusRequestEntityTooLarge},

	imv1.ErrorCode_ERROR_CODE_NOT_A_MEMBER:       {"you are not a member of this session", false, http.StatusForbidden},
	imv1.ErrorCode_ERROR_CODE_EDIT_WINDOW_CLOSED: {"the edit/recall window of this message has closed", false, http.StatusForbidden},
	imv1.ErrorCode_ERROR_CODE_SESSION_EXISTS:     {"the session already exists", false, http.StatusConflict},
	imv1.ErrorCode_ERROR_CODE_SESSION_NOT_FOUND:  {"no such session", false, http.StatusNotFound},
	imv1.ErrorCode_ERROR_CODE_NOT_OWN_MESSAGE:    {"only the sender can edit or recall a message", false, http.StatusForbidden},
	// Retryable: the target may not have reached the message store yet.
	imv1.ErrorCode_ERROR_CODE_MESSAGE_NOT_FOUND: {"no message with this seq in the session (yet)", true, http.StatusNotFound},
	imv1.ErrorCode_ERROR_CODE_NOT_PERMITTED:     {"your role in this group does not allow this", false, http.StatusForbidden},
	imv1.ErrorCode_ERROR_CODE_MUTED:             {"you are muted in this group", false, http.StatusForbidden},
	imv1.ErrorCode_ERROR_CODE_GROUP_DISSOLVED:   {"the group was dissolved", false, http.StatusGone},
	imv1.ErrorCode_ERROR_CODE_GROUP_FULL:        {"the group is at its member limit", false, http.StatusConflict},

	imv1.ErrorCode_ERROR_CODE_UNAVAILABLE:   {"a dependency is unavailable; retry with the same client_msg_id", true, http.StatusServiceUnavailable},
	imv1.ErrorCode_ERROR_CODE_TIMEOUT:       {"the request timed out; retry with the same client_msg_id", true, http.StatusGatewayTimeout},
	imv1.ErrorCode_ERROR_CODE_INTERNAL:      {"internal error", true, http.StatusInternalServerError},
	imv1.ErrorCode_ERROR_CODE_SHUTTING_DOWN: {"the gateway is shutting down; reconnect and retry", true, http.StatusServiceUnavailable},

	imv1.ErrorCode_ERROR_CODE_UNDECODABLE: {"a record could not be decoded", false, http.StatusInternalServerError},
	imv1.ErrorCode_ERROR_CODE_CONSTRAINT:  {"a record broke a pipeline constraint", false, http.StatusInternalServerError},
}

// Lookup returns the entry of code; unknown codes get UNSPECIFIED's entry
// and ok=false.
func Lookup(code imv1.ErrorCode) (e Entry, ok bool) {
	e, ok = registry[code]
	if !ok {
		e = registry[imv1.ErrorCode_ERROR_CODE_UNSPECIFIED]
	}
	return e, ok
}

// Name is the stable lower-case name clients see ("not_a_member").
func Name(code imv1.ErrorCode) string {
	n, ok := imv1.ErrorCode_name[int32(code)]
	if !ok {
		return "unspecified"
	}
	return strings.ToLower(strings.TrimPrefix(n, "ERROR_CODE_"))
}

// Error is a client-facing error: a code from the registry and an optional
// detail that says which field or limit.
type Error struct {
	Code   imv1.ErrorCode
	Detail string
}

// New returns an error with code and detail (which may be empty).
func New(code imv1.ErrorCode, detail string) *Error {
	return &Error{Code: code, Detail: detail}
}

// Newf returns an error with code and a detail formatted like fmt.Sprintf.
func Newf(code imv1.ErrorCode, format string, args ...any) *Error {
	return &Error{Code: code, Detail: fmt.Sprintf(format, args...)}
}

// Error returns "name: message[: detail]".
func (e *Error) Error() string {
	if e.Detail == "" {
		return Name(e.Code) + ": " + e.Message()
	}
	return Name(e.Code) + ": " + e.Detail
}

// Message is the detail when set, else the registry's message.
func (e *Error) Message() string {
	if e.Detail != "" {
		return e.Detail
	}
	en, _ := Lookup(e.Code)
	return en.Message
}

// Retryable reports the registry's retry advice for the code.
func (e *Error) Retryable() bool {
	en, _ := Lookup(e.Code)
	return en.Retryable
}

// HTTPStatus is the HTTP status for the code.
func (e *Error) HTTPStatus() int {
	en, _ := Lookup(e.Code)
	return en.HTTPStatus
}

// Body is the JSON shape of an error in frames and responses.
type Body struct {
	// Code is the numeric ErrorCode; Name its stable name.
	Code      int32  `json:"code"`
	Name      string `json:"name"`
	Message   string `json:"message"`
	Retryable bool   `json:"retryable"`
}

// Body returns the JSON shape of e.
func (e *Error) Body() Body {
	return Body{Code: int32(e.Code), Name: Name(e.Code), Message: e.Message(), Retryable: e.Retryable()}
}
