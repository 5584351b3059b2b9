package main

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/config"
	"github.com/seqflow/seqflow/schemas/imv1"
)

func TestDecodeUplink(t *testing.T) {
	msg := func(mut func(*imv1.Uplink)) []byte {
		u := &imv1.Uplink{SessionId: "s1", ClientMsgId: "c1", SenderUserId: "u1",
			Command: &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte("hi")}}}
		if mut != nil {
			mut(u)
		}
		b, _ := proto.Marshal(u)
		return b
	}
	tests := []struct {
		name  string
		key   string
		value []byte
		want  imv1.ErrorCode
	}{
		{"valid", "s1", msg(nil), 0},
		{"garbage", "s1", []byte{0xff, 0xff, 0xff}, imv1.ErrorCode_ERROR_CODE_UNDECODABLE},
		{"too large", "s1", msg(func(u *imv1.Uplink) {
			u.Command = &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte(strings.Repeat("x", 2000))}}
		}), imv1.ErrorCode_ERROR_CODE_TOO_LARGE},
		{"no client msg id", "s1", msg(func(u *imv1.Uplink) { u.ClientMsgId = "" }), imv1.ErrorCode_ERROR_CODE_MISSING_FIELD},
		{"no sender", "s1", msg(func(u *imv1.Uplink) { u.SenderUserId = "" }), imv1.ErrorCode_ERROR_CODE_MISSING_FIELD},
		{"key is not the session", "s2", msg(nil), imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		{"no command", "s1", msg(func(u *imv1.Uplink) { u.Command = nil }), imv1.ErrorCode_ERROR_CODE_UNKNOWN_TYPE},
		{"no message type", "s1", msg(func(u *imv1.Uplink) {
			u.Command = &imv1.Uplink_Message{Message: &imv1.MessageContent{}}
		}), imv1.ErrorCode_ERROR_CODE_UNKNOWN_TYPE},
		{"recall without target", "s1", msg(func(u *imv1.Uplink) { u.Command = &imv1.Uplink_Recall{Recall: &imv1.Recall{}} }), imv1.ErrorCode_ERROR_CODE_INVALID_FIELD},
		// proto3 strings must be UTF-8: the decoder itself refuses them.
		{"invalid utf8 id", "s1", msg(func(u *imv1.Uplink) { u.ClientMsgId = "\xff" }), imv1.ErrorCode_ERROR_CODE_UNDECODABLE},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, bad := decodeUplink([]byte(tt.key), tt.value, 1024)
			switch {
			case tt.want == 0 && bad != nil:
				t.Fatalf("valid uplink rejected: %v", bad)
			case tt.want != 0 && bad == nil:
				t.Fatalf("want %s, accepted", tt.want)
			case tt.want != 0 && (bad.Code != tt.want || bad.Reason == ""):
				t.Fatalf("got %s %q, want %s with a reason", bad.Code, bad.Reason, tt.want)
			}
		})
	}
}

// FuzzDecodeUplink: whatever arrives on the uplink topic, decoding either
// accepts a complete uplink or says why not; it never panics.
func FuzzDecodeUplink(f *testing.F) {
	ok, _ := proto.Marshal(&imv1.Uplink{SessionId: "s", ClientMsgId: "c", SenderUserId: "u",
		Command: &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text"}}})
	f.Add([]byte("s"), ok)
	f.Add([]byte("s"), []byte{0x0a, 0x01})
	f.Fuzz(func(t *testing.T, key, value []byte) {
		u, bad := decodeUplink(key, value, 4096)
		if (u == nil) == (bad == nil) {
			t.Fatalf("want exactly one of uplink and reason, got %v and %v", u, bad)
		}
		if u != nil && (u.SessionId == "" || u.ClientMsgId == "" || string(key) != u.SessionId) {
			t.Fatalf("accepted an incomplete uplink: %v", u)
		}
	})
}

func TestConfigRefusesBatchesAboveTheStep(t *testing.T) {
	_, err := LoadConfig(config.FromMap(map[string]string{
		"SEQFLOW_KAFKA_BROKERS": "127.0.0.1:1", "SEQFLOW_PG_URL": "postgres://x",
		"SEQUENCER_STEP": "100", "SEQUENCER_MAX_POLL_RECORDS": "101",
	}))
	if err == nil || !strings.Contains(err.Error(), "SEQUENCER_MAX_POLL_RECORDS=101") {
		t.Fatalf("want a clear error about the poll size, got %v", err)
	}
	if _, err := LoadConfig(config.FromMap(map[string]string{"SEQFLOW_KAFKA_BROKERS": "127.0.0.1:1", "SEQFLOW_PG_URL": "postgres://x"})); err != nil {
		t.Fatalf("defaults must be valid: %v", err)
	}
	_, err = LoadConfig(config.FromMap(map[string]string{"SEQUENCER_STEP": "zero"}))
	for _, want := range []string{"SEQFLOW_PG_URL is required", "SEQFLOW_KAFKA_BROKERS is required", "SEQUENCER_STEP="} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}
