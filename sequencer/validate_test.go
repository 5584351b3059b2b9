package main

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

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
	f.Add([]byte("s"), []byte("\x0a\x01s\x12\x01c\x1a\x01u\x52\x06\x0a\x04\xff\xfe\xfd\xfc"))
	// An unknown field numbered 2^29 inside the message content (refused
	// by proto.Unmarshal, kept by UnmarshalVT), and a tag past 2^32 that
	// wraps onto session_id in UnmarshalVT.
	f.Add([]byte("s"), []byte("\x0a\x01s\x12\x01c\x1a\x01u\x52\x0e\x0a\x04text\x12\x02hi\x80\x80\x80\x80\x10\x00"))
	f.Add([]byte("s"), []byte("\x8a\x80\x80\x80\x10\x01s\x12\x01c\x1a\x01u\x52\x06\x0a\x04text"))
	f.Fuzz(func(t *testing.T, key, value []byte) {
		u, bad := decodeUplink(key, value, 4096)
		if (u == nil) == (bad == nil) {
			t.Fatalf("want exactly one of uplink and reason, got %v and %v", u, bad)
		}
		if u != nil && (u.SessionId == "" || u.ClientMsgId == "" || string(key) != u.SessionId) {
			t.Fatalf("accepted an incomplete uplink: %v", u)
		}
		// The fast decoder agrees with the reference one: it accepts
		// nothing proto.Unmarshal refuses, decodes the same message, and
		// calls nothing undecodable that proto.Unmarshal decodes.
		var ref imv1.Uplink
		refErr := proto.Unmarshal(value, &ref)
		switch {
		case u != nil && refErr != nil:
			t.Fatalf("accepted what proto.Unmarshal refuses (%v): %v", refErr, u)
		case u != nil && !proto.Equal(u, &ref):
			t.Fatalf("decoded %v, proto.Unmarshal decodes %v", u, &ref)
		case bad != nil && bad.Code == imv1.ErrorCode_ERROR_CODE_UNDECODABLE && refErr == nil:
			t.Fatalf("refused as undecodable (%s) what proto.Unmarshal decodes: %v", bad.Reason, &ref)
		}
		if u != nil {
			// The event built from it encodes to what proto.Marshal's
			// form decodes to.
			var events eventBuilder
			ev := events.sequenced(u, 7, 8, 9, 1, 2)
			fast, err := appendEvent([]byte("prefix"), ev)
			if err != nil {
				t.Fatal(err)
			}
			var got imv1.SequencedEvent
			if err := proto.Unmarshal(fast[len("prefix"):], &got); err != nil || !proto.Equal(&got, ev) {
				t.Fatalf("appendEvent wrote %x, which decodes to %v (%v), want %v", fast, &got, err, ev)
			}
		}
	})
}

// TestDecodeUplinkRefusesInvalidUTF8InEveryString puts invalid UTF-8 into
// each string field reachable from an uplink, one at a time (found by
// walking the descriptor, so a new field is covered without editing the
// test), and expects the decoder to refuse it as proto.Unmarshal would.
func TestDecodeUplinkRefusesInvalidUTF8InEveryString(t *testing.T) {
	commands := imv1.File_seqflow_im_v1_uplink_proto.Messages().ByName("Uplink").Oneofs().ByName("command").Fields()
	// stringPaths lists the paths (field descriptors from the root) to every
	// string field of m's type, not following the command oneof's other
	// branches.
	var stringPaths func(md protoreflect.MessageDescriptor, path []protoreflect.FieldDescriptor, cmd protoreflect.FieldDescriptor) [][]protoreflect.FieldDescriptor
	stringPaths = func(md protoreflect.MessageDescriptor, path []protoreflect.FieldDescriptor, cmd protoreflect.FieldDescriptor) [][]protoreflect.FieldDescriptor {
		var out [][]protoreflect.FieldDescriptor
		fields := md.Fields()
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			if fd.ContainingOneof() != nil && fd.ContainingOneof().Name() == "command" && fd != cmd {
				continue
			}
			p := append(append([]protoreflect.FieldDescriptor(nil), path...), fd)
			switch fd.Kind() {
			case protoreflect.StringKind:
				out = append(out, p)
			case protoreflect.MessageKind:
				out = append(out, stringPaths(fd.Message(), p, cmd)...)
			}
		}
		return out
	}
	tried := 0
	for i := 0; i < commands.Len(); i++ {
		cmd := commands.Get(i)
		for _, path := range stringPaths(imv1.File_seqflow_im_v1_uplink_proto.Messages().ByName("Uplink"), nil, cmd) {
			u := validUplink(t, cmd)
			m := u.ProtoReflect()
			for _, fd := range path[:len(path)-1] {
				m = m.Mutable(fd).Message()
			}
			last := path[len(path)-1]
			if last.IsList() {
				m.Mutable(last).List().Append(protoreflect.ValueOfString("\xff"))
			} else {
				m.Set(last, protoreflect.ValueOfString("\xff"))
			}
			value, err := u.MarshalVT() // proto.Marshal would refuse it
			if err != nil {
				t.Fatal(err)
			}
			name := cmd.Name()
			for _, fd := range path {
				name += "." + fd.Name()
			}
			if _, bad := decodeUplink([]byte(u.SessionId), value, 4096); bad == nil || bad.Code != imv1.ErrorCode_ERROR_CODE_UNDECODABLE {
				t.Errorf("%s: invalid UTF-8 got %v, want %s", name, bad, imv1.ErrorCode_ERROR_CODE_UNDECODABLE)
			}
			tried++
		}
		if _, bad := decodeUplink([]byte("s1"), mustVT(t, validUplink(t, cmd)), 4096); bad != nil {
			t.Errorf("%s: the valid example was refused: %v", cmd.Name(), bad)
		}
	}
	if tried < 10 {
		t.Fatalf("found only %d string fields: the walk is broken", tried)
	}
}

// validUplink is a valid uplink of command cmd with every string set.
func validUplink(t *testing.T, cmd protoreflect.FieldDescriptor) *imv1.Uplink {
	t.Helper()
	u := &imv1.Uplink{SessionId: "s1", ClientMsgId: "c1", SenderUserId: "u1", SenderDeviceId: "d1", GatewayId: "g1"}
	switch cmd.Name() {
	case "message":
		u.Command = &imv1.Uplink_Message{Message: &imv1.MessageContent{Type: "text", Body: []byte("hi")}}
	case "session_create":
		u.Command = &imv1.Uplink_SessionCreate{SessionCreate: &imv1.SessionCreate{Title: "t", MemberUserIds: []string{"u1"}}}
	case "membership":
		u.Command = &imv1.Uplink_Membership{Membership: &imv1.MembershipChange{Op: imv1.MembershipChange_OP_ADD, UserIds: []string{"u2"}}}
	case "edit":
		u.Command = &imv1.Uplink_Edit{Edit: &imv1.Edit{TargetSeq: 1, Content: &imv1.MessageContent{Type: "text"}}}
	case "recall":
		u.Command = &imv1.Uplink_Recall{Recall: &imv1.Recall{TargetSeq: 1}}
	case "group":
		title := "t"
		u.Command = &imv1.Uplink_Group{Group: &imv1.GroupChange{Op: &imv1.GroupChange_Edit{Edit: &imv1.GroupChange_EditGroup{Title: &title}}}}
	default:
		t.Fatalf("command %s has no valid example here: add one", cmd.Name())
	}
	return u
}

func mustVT(t *testing.T, u *imv1.Uplink) []byte {
	t.Helper()
	b, err := u.MarshalVT()
	if err != nil {
		t.Fatal(err)
	}
	return b
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
	_, err = LoadConfig(config.FromMap(map[string]string{"SEQFLOW_KAFKA_BROKERS": "127.0.0.1:1", "SEQFLOW_PG_URL": "postgres://x", "SEQFLOW_KAFKA_COMPRESSION": "gzip"}))
	if err == nil || !strings.Contains(err.Error(), `SEQFLOW_KAFKA_COMPRESSION="gzip"`) {
		t.Fatalf("want a clear error about the codec, got %v", err)
	}
	_, err = LoadConfig(config.FromMap(map[string]string{"SEQUENCER_STEP": "zero"}))
	for _, want := range []string{"SEQFLOW_PG_URL is required", "SEQFLOW_KAFKA_BROKERS is required", "SEQUENCER_STEP="} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
}

// TestDecodeUplinkFallsBackOnUnknownFieldsEverywhere puts an unknown field
// into each message reachable from an uplink, one at a time (found by
// walking the descriptor): a valid one must be kept exactly as
// proto.Unmarshal keeps it, and one proto.Unmarshal refuses (field number
// 2^29) must be refused, not copied into the event.
func TestDecodeUplinkFallsBackOnUnknownFieldsEverywhere(t *testing.T) {
	uplinkDesc := imv1.File_seqflow_im_v1_uplink_proto.Messages().ByName("Uplink")
	commands := uplinkDesc.Oneofs().ByName("command").Fields()
	// messagePaths lists the paths to every message of the tree (the
	// root is the empty path), the command oneof's other branches left out.
	var messagePaths func(md protoreflect.MessageDescriptor, path []protoreflect.FieldDescriptor, cmd protoreflect.FieldDescriptor) [][]protoreflect.FieldDescriptor
	messagePaths = func(md protoreflect.MessageDescriptor, path []protoreflect.FieldDescriptor, cmd protoreflect.FieldDescriptor) [][]protoreflect.FieldDescriptor {
		out := [][]protoreflect.FieldDescriptor{path}
		fields := md.Fields()
		for i := 0; i < fields.Len(); i++ {
			fd := fields.Get(i)
			if fd.Kind() != protoreflect.MessageKind || fd.ContainingOneof() != nil && fd.ContainingOneof().Name() == "command" && fd != cmd {
				continue
			}
			out = append(out, messagePaths(fd.Message(), append(append([]protoreflect.FieldDescriptor(nil), path...), fd), cmd)...)
		}
		return out
	}
	unknowns := map[string][]byte{
		"valid (field 99 = 1)":                 {0x98, 0x06, 0x01},
		"refused (field 2^29, beyond the max)": {0x80, 0x80, 0x80, 0x80, 0x10, 0x00},
	}
	tried := 0
	for i := 0; i < commands.Len(); i++ {
		cmd := commands.Get(i)
		for _, path := range messagePaths(uplinkDesc, nil, cmd) {
			for what, raw := range unknowns {
				u := validUplink(t, cmd)
				m := u.ProtoReflect()
				name := string(cmd.Name())
				for _, fd := range path {
					m = m.Mutable(fd).Message()
					name += "." + string(fd.Name())
				}
				m.SetUnknown(append(m.GetUnknown(), raw...))
				value := mustVT(t, u)
				var ref imv1.Uplink
				refErr := proto.Unmarshal(value, &ref)
				got, bad := decodeUplink([]byte("s1"), value, 4096)
				switch {
				case refErr != nil && bad == nil:
					t.Errorf("%s, unknown field %s: accepted what proto.Unmarshal refuses (%v)", name, what, refErr)
				case refErr == nil && bad != nil:
					t.Errorf("%s, unknown field %s: refused (%v) what proto.Unmarshal decodes", name, what, bad)
				case refErr == nil && !proto.Equal(got, &ref):
					t.Errorf("%s, unknown field %s: decoded %v, proto.Unmarshal %v", name, what, got, &ref)
				}
				tried++
			}
		}
	}
	if tried < 14 {
		t.Fatalf("tried only %d placements: the walk is broken", tried)
	}
}
