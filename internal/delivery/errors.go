package delivery

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// Sentinel errors of the transports. Send wraps them; test with errors.Is.
var (
	// ErrNoReceiver means no receiver is listening for the gateway: the
	// gateway is down, restarting, or was never there. Retrying the same
	// batch cannot help; its connections are gone with it.
	ErrNoReceiver = errors.New("no receiver for gateway")
	// ErrTooLarge means one item alone exceeds the transport's frame limit.
	ErrTooLarge = errors.New("push item exceeds the frame limit")
	// ErrClosed means the sender or receiver was closed.
	ErrClosed = errors.New("transport closed")
	// ErrBadBatch means a received frame did not decode as a PushBatch for
	// this gateway; the receiver skips it.
	ErrBadBatch = errors.New("bad push batch")
	// errWrongGateway is the ErrBadBatch of a frame addressed to another
	// gateway: on a stream it means the sender dialed a stale registry
	// entry (this listener's port belonged to that gateway before), so the
	// TCP receiver hangs up and the sender looks the gateway up again.
	errWrongGateway = fmt.Errorf("%w: addressed to another gateway", ErrBadBatch)
)

// SendError is a failed Send: which gateway, and why.
type SendError struct {
	GatewayID string
	Err       error
}

func (e *SendError) Error() string {
	return fmt.Sprintf("send push batch to gateway %s: %v", e.GatewayID, e.Err)
}

func (e *SendError) Unwrap() error { return e.Err }

// DropReason classifies a Send error into the label the pusher counts its
// dropped batches under: "no_receiver", "timeout", "too_large", "closed" or
// "transport". No reason is retryable on the push path: the batch is
// dropped and the clients' gap detection and sync recover it.
func DropReason(err error) string {
	switch {
	case errors.Is(err, ErrNoReceiver):
		return "no_receiver"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded):
		return "timeout"
	case errors.Is(err, ErrTooLarge):
		return "too_large"
	case errors.Is(err, ErrClosed), errors.Is(err, context.Canceled):
		return "closed"
	default:
		return "transport"
	}
}
