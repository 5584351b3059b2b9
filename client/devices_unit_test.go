package client

import (
	"errors"
	"fmt"
	"testing"

	"github.com/coder/websocket"
)

func TestCloseReason(t *testing.T) {
	for _, c := range []struct {
		err  error
		want error
	}{
		{fmt.Errorf("read: %w", websocket.CloseError{Code: CloseSignedOut, Reason: "signed_out"}), ErrSignedOut},
		{fmt.Errorf("read: %w", websocket.CloseError{Code: CloseReplaced, Reason: "replaced"}), ErrReplaced},
		{fmt.Errorf("read: %w", websocket.CloseError{Code: 4001, Reason: "token_expired"}), nil},
		{fmt.Errorf("read: %w", websocket.CloseError{Code: websocket.StatusServiceRestart}), nil},
		{errors.New("EOF"), nil},
	} {
		if got := closeReason(c.err); got != c.want {
			t.Errorf("closeReason(%v) = %v, want %v", c.err, got, c.want)
		}
	}
	if !IsSignedOut(ErrSignedOut) || !IsSignedOut(&HandshakeError{Status: 401, Err: &ServerError{Name: "signed_out"}}) || IsSignedOut(ErrReplaced) {
		t.Error("IsSignedOut misclassifies")
	}
}

func TestWithPlatform(t *testing.T) {
	for in, want := range map[string]string{
		"ws://h:1/v1/ws":            "ws://h:1/v1/ws?platform=ios",
		"wss://h/v1/ws?x=1":         "wss://h/v1/ws?platform=ios&x=1",
		"ws://h/v1/ws?platform=web": "ws://h/v1/ws?platform=ios",
	} {
		if got := withPlatform(in, "ios"); got != want {
			t.Errorf("withPlatform(%q) = %q, want %q", in, got, want)
		}
	}
	if got := withPlatform("ws://h/v1/ws", ""); got != "ws://h/v1/ws" {
		t.Errorf("no platform: %q", got)
	}
	if _, err := New(Options{URLs: []string{"ws://h"}, Token: "t", Platform: "iOS"}); err == nil {
		t.Error("New accepted Platform iOS")
	}
}
