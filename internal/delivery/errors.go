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
	// ErrPeerAuth means a peer failed authentication: a frame or message
	// without a valid MAC of a key in the ring, a replay, a handshake that
	// failed, a gateway that could not prove its key and identity, or a
	// registry entry that is not signed. Receivers close the connection (or
	// drop the message) and count it by reason. On a sender it comes with
	// ErrNoReceiver: nothing is written to the impostor, and a ChainSender
	// tries its next transport.
	ErrPeerAuth = errors.New("peer authentication failed")
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

// The reasons a receiver refuses a connection, frame or message, as
// RejectFunc and the gateway's push_rejected_total metric name them.
const (
	RejectConnLimit    = "conn_limit"    // the listener is at its connection or handshake cap
	RejectHandshake    = "handshake"     // malformed, too slow or cut short
	RejectUnknownKey   = "unknown_key"   // signed by a key ID the ring does not hold
	RejectWrongGateway = "wrong_gateway" // addressed to another gateway
	RejectBadMAC       = "bad_mac"       // a MAC or proof that does not verify
	RejectStale        = "stale"         // a pub/sub message outside the clock window
	RejectReplay       = "replay"        // a pub/sub message seen before
	RejectIdle         = "idle"          // no complete frame within the idle timeout
	RejectOversize     = "oversize"      // a frame above MaxFrameBytes
)

// RejectFunc is told of every connection, frame or message a receiver
// refuses, with its reason (the Reject* constants) and the error.
type RejectFunc func(reason string, err error)

// DropReason classifies a Send error into the label the pusher counts its
// dropped batches under: "no_receiver", "timeout", "too_large", "closed",
// "peer_auth" or "transport". No reason is retryable on the push path: the batch is
// dropped and the clients' gap detection and sync recover it.
func DropReason(err error) string {
	switch {
	case errors.Is(err, ErrPeerAuth):
		return "peer_auth"
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
