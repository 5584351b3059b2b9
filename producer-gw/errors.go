package main

import (
	"context"
	"errors"

	"github.com/seqflow/seqflow/internal/apierr"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// ErrShuttingDown is returned for requests that arrive while the gateway
// drains; clients reconnect (to another instance) and retry.
var ErrShuttingDown = apierr.New(imv1.ErrorCode_ERROR_CODE_SHUTTING_DOWN, "")

// Close codes of the WebSocket protocol besides the standard ones.
const (
	// closeIdle: nothing (frame or pong) arrived within GATEWAY_IDLE_TIMEOUT.
	closeIdle = 4000
	// closeTokenExpired: the connection's token expired; reconnect with a new one.
	closeTokenExpired = 4001
	// closeSignedOut: the connection's device was signed out; its token
	// never works again.
	closeSignedOut = 4002
	// closeReplaced: the login policy closed the connection for a newer
	// one of the same platform (or device); do not reconnect by itself.
	closeReplaced = 4003
	// closeSlowConsumer: the connection's queue overflowed; reconnect and sync.
	closeSlowConsumer = 4008
)

// produceError turns a failed Kafka produce into the client's error. It is
// always retryable: the uplink may or may not be in the log, and a retry
// with the same client_msg_id is deduplicated by the sequencer, so the
// client never sees a false OK nor a duplicate.
func produceError(err error) *apierr.Error {
	if errors.Is(err, context.DeadlineExceeded) {
		return apierr.New(imv1.ErrorCode_ERROR_CODE_TIMEOUT, "Kafka did not confirm the uplink in time; retry with the same client_msg_id")
	}
	return apierr.New(imv1.ErrorCode_ERROR_CODE_UNAVAILABLE, "Kafka did not accept the uplink; retry with the same client_msg_id")
}

// storeError turns a failed message-store read into the client's error.
func storeError(err error) *apierr.Error {
	if errors.Is(err, context.DeadlineExceeded) {
		return apierr.New(imv1.ErrorCode_ERROR_CODE_TIMEOUT, "the message store did not answer in time")
	}
	return apierr.New(imv1.ErrorCode_ERROR_CODE_UNAVAILABLE, "the message store is unavailable")
}

// asAPI returns err as a registry error, INTERNAL for anything else.
func asAPI(err error) *apierr.Error {
	var ae *apierr.Error
	if errors.As(err, &ae) {
		return ae
	}
	return apierr.New(imv1.ErrorCode_ERROR_CODE_INTERNAL, "")
}
