package client

import (
	"errors"
	"fmt"
	"net/http"

	"github.com/seqflow/seqflow/internal/wire"
)

// Sentinel errors of the client itself.
var (
	// ErrClosed is returned by calls made after Run returned, and by the
	// Wait of a command that was still in flight when Run returned (with an
	// outbox, such a command is resent by the next client on that file).
	ErrClosed = errors.New("client closed")
	// ErrConnectionLost is returned by a request (sync, changes, read) whose
	// connection dropped before the answer arrived. Client methods retry it
	// on the next connection; it surfaces only from a single attempt.
	ErrConnectionLost = errors.New("connection lost")
	// ErrNoToken means Options had neither Token nor TokenSource.
	ErrNoToken = errors.New("no token: set Options.Token or Options.TokenSource")
)

// ServerError is an error frame of the gateway: the registry's stable code
// and name, its message, and whether the same request, unchanged, can
// succeed when retried (docs/protocol.md, "Errors").
type ServerError struct {
	Code      int32
	Name      string
	Message   string
	Retryable bool
	// ClientMsgID is set when the error answers a command.
	ClientMsgID string
}

func (e *ServerError) Error() string {
	if e.ClientMsgID != "" {
		return fmt.Sprintf("%s (%d) for %s: %s", e.Name, e.Code, e.ClientMsgID, e.Message)
	}
	return fmt.Sprintf("%s (%d): %s", e.Name, e.Code, e.Message)
}

func serverError(b *wire.ErrorBody, clientMsgID string) *ServerError {
	return &ServerError{Code: b.Code, Name: b.Name, Message: b.Message, Retryable: b.Retryable, ClientMsgID: clientMsgID}
}

// HandshakeError is a refused WebSocket handshake: the HTTP status and, when
// the gateway sent one, its error (unauthenticated, token_expired, ...).
type HandshakeError struct {
	Status int
	Err    *ServerError // nil when the body was not an error frame
}

func (e *HandshakeError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("handshake refused with HTTP %d: %v", e.Status, e.Err)
	}
	return fmt.Sprintf("handshake refused with HTTP %d", e.Status)
}

func (e *HandshakeError) Unwrap() error {
	if e.Err == nil {
		return nil
	}
	return e.Err
}

// IsRetryable reports whether retrying what failed with err can succeed:
// a retryable server error, a lost connection, or a handshake refused for
// a reason other than the token (401) or the request (4xx but 429).
// Client methods already retry these; the classifier is for callers that
// drive their own retries on top.
func IsRetryable(err error) bool {
	var he *HandshakeError
	if errors.As(err, &he) {
		return he.Status == http.StatusTooManyRequests || he.Status >= 500
	}
	var se *ServerError
	if errors.As(err, &se) {
		return se.Retryable
	}
	return errors.Is(err, ErrConnectionLost)
}

// IsAuth reports whether err means the token was refused: a new token is
// needed before reconnecting can succeed.
func IsAuth(err error) bool {
	var he *HandshakeError
	if errors.As(err, &he) && he.Status == http.StatusUnauthorized {
		return true
	}
	var se *ServerError
	return errors.As(err, &se) && (se.Name == "unauthenticated" || se.Name == "token_expired" || se.Name == "signed_out")
}
