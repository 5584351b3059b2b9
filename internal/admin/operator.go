package admin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
)

// MaxBodyBytes bounds an operator request's body.
const MaxBodyBytes = 64 << 10

type actorKey struct{}

// Actor returns the name of the operator token that authenticated the
// request whose context is ctx ("" outside an operator endpoint).
func Actor(ctx context.Context) string {
	a, _ := ctx.Value(actorKey{}).(string)
	return a
}

// Operator guards an operator endpoint, on the admin port (Server.Routes)
// or on any other server of operators and services (one scheme for all):
// the request must carry a token of tok as "Authorization: Bearer
// <token>" (no cookie or query parameter is read: a page in the
// operator's browser cannot make its requests carry one), and a request
// with a body must be application/json (a cross-site form post is refused
// even were it to carry a token). A nil tok refuses everything
// (CodeOperatorAuthOff). The handler finds the token's name in
// Actor(r.Context()); log, when set, gets every request's actor or refusal.
func Operator(tok *Tokens, log *slog.Logger, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		actor, e := authenticate(tok, r)
		if e == nil {
			e = checkJSON(r)
		}
		if e != nil {
			if log != nil {
				log.Warn("operator request refused", "method", r.Method, "path", r.URL.Path, "remote_addr", r.RemoteAddr,
					"actor", actor, "code", e.Code)
			}
			WriteError(w, e)
			return
		}
		if log != nil {
			log.Info("operator request", "method", r.Method, "path", r.URL.Path, "remote_addr", r.RemoteAddr, "actor", actor)
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), actorKey{}, actor)))
	})
}

func authenticate(tok *Tokens, r *http.Request) (string, *Error) {
	if tok == nil {
		return "", &Error{http.StatusForbidden, CodeOperatorAuthOff,
			"operator endpoints are off: set " + EnvTokensFile + " to a file of name:token lines"}
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return "", &Error{http.StatusUnauthorized, CodeUnauthenticated,
			"an Authorization: Bearer <token> header with a token of " + EnvTokensFile + " is required"}
	}
	actor, err := tok.actor(strings.TrimSpace(token))
	if err != nil {
		return "", &Error{http.StatusForbidden, CodeOperatorAuthOff, "operator endpoints are off: " + err.Error()}
	}
	if actor == "" {
		return "", &Error{http.StatusUnauthorized, CodeUnauthenticated, "the bearer token matches none of " + EnvTokensFile}
	}
	return actor, nil
}

// checkJSON refuses a request that may carry a body unless it says it is
// application/json (a charset parameter, if any, utf-8).
func checkJSON(r *http.Request) *Error {
	switch r.Method {
	case http.MethodGet, http.MethodHead:
		return nil
	}
	ct := r.Header.Get("Content-Type")
	mt, params, err := mime.ParseMediaType(ct)
	cs, hasCS := params["charset"]
	if err != nil || mt != "application/json" || len(params) > 1 || (len(params) == 1 && (!hasCS || !strings.EqualFold(cs, "utf-8"))) {
		return &Error{http.StatusUnsupportedMediaType, CodeUnsupportedMediaType,
			fmt.Sprintf("operator endpoints take only Content-Type: application/json, not %q (form posts are refused)", ct)}
	}
	return nil
}

// DecodeJSON reads r's body, at most MaxBodyBytes, into v: one JSON
// object with none but v's members, each once (encoding/json/v2's strict
// reading, as the gateway reads client frames).
func DecodeJSON(r *http.Request, v any) *Error {
	b, err := io.ReadAll(io.LimitReader(r.Body, MaxBodyBytes+1))
	if err != nil {
		return &Error{http.StatusBadRequest, CodeBadRequest, "read the body: " + err.Error()}
	}
	if len(b) > MaxBodyBytes {
		return &Error{http.StatusRequestEntityTooLarge, CodeTooLarge, fmt.Sprintf("the body is over %d bytes", MaxBodyBytes)}
	}
	if err := jsonv2.Unmarshal(b, v, jsonv2.RejectUnknownMembers(true)); err != nil {
		var se *jsonv2.SemanticError
		if errors.As(err, &se) && errors.Is(err, jsonv2.ErrUnknownName) {
			return &Error{http.StatusBadRequest, CodeBadRequest, "unknown member " + string(se.JSONPointer)}
		}
		return &Error{http.StatusBadRequest, CodeBadRequest, "the body is not the JSON object this endpoint takes: " + err.Error()}
	}
	return nil
}
