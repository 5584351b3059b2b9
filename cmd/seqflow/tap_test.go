package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/seqflow/seqflow/internal/testkit/clienttest"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// TestClientCommands runs send, tap, tail, chat and load against the whole
// pipeline (clienttest: sequencer, persister, pusher, producer-gw as
// processes).
func TestClientCommands(t *testing.T) {
	p := clienttest.Start(t)
	gw := p.Gateway(t, "gw-cli")
	alice, bob := clienttest.User("alice"), clienttest.User("bob")
	conn := []string{"-gateway", gw.URL, "-secret", clienttest.Secret}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// send: a new group, three messages from stdin, one ACK line each.
	var out bytes.Buffer
	if err := send(ctx, strings.NewReader("one\ntwo\nthree\n"), &out, append(conn, "-user", alice, "-group", bob, "-title", "cli", "-")); err != nil {
		t.Fatal(err)
	}
	var acks []ackLine
	for _, l := range lines(t, out.String()) {
		var a ackLine
		if err := json.Unmarshal([]byte(l), &a); err != nil {
			t.Fatalf("send printed %q: %v", l, err)
		}
		acks = append(acks, a)
	}
	if len(acks) != 3 || acks[0].SessionID == "" || acks[0].Seq <= 0 || !(acks[0].Seq < acks[1].Seq && acks[1].Seq < acks[2].Seq) {
		t.Fatalf("acks %+v, want three with increasing seqs in one session", acks)
	}
	sid := acks[0].SessionID
	bodies := []string{"one", "two", "three"}

	t.Run("tap output parsed back is what was sent", func(t *testing.T) {
		got := tapEvents(t, ctx, "-topic-prefix", p.Prefix, "-from", "start", "-session", sid, "-type", "message", "-n", "3", "-idle-exit", "30s")
		if len(got) != 3 {
			t.Fatalf("tap printed %d events, want 3", len(got))
		}
		for i, g := range got {
			if g.ev.GetSessionId() != sid || g.ev.GetSeq() != acks[i].Seq || g.ev.GetClientMsgId() != acks[i].ClientMsgID ||
				fmt.Sprint(g.ev.GetMsgId()) != acks[i].MsgID || g.ev.GetSenderUserId() != alice ||
				string(g.ev.GetMessage().GetBody()) != bodies[i] || g.line.Type != "message" {
				t.Fatalf("tap event %d = %+v (%s), want seq %d %s %q from %s", i, g.ev, g.line.Type, acks[i].Seq, acks[i].ClientMsgID, bodies[i], alice)
			}
		}
		// Starting at the second message's offset, in its partition or in all.
		second := got[1].line
		for _, from := range []string{fmt.Sprintf("offset:%d=%d", second.Partition, second.Offset), fmt.Sprintf("offset:%d", second.Offset)} {
			t.Run(from, func(t *testing.T) {
				part := tapEvents(t, ctx, "-topic-prefix", p.Prefix, "-from", from, "-session", sid, "-n", "2", "-idle-exit", "10s")
				if len(part) != 2 || part[0].ev.GetSeq() != acks[1].Seq || part[1].ev.GetSeq() != acks[2].Seq {
					t.Fatalf("tap -from %s: %d events starting at %+v, want seqs %d and %d", from, len(part), part, acks[1].Seq, acks[2].Seq)
				}
			})
		}
		// Starting at the end prints nothing of the past.
		if end := tapEvents(t, ctx, "-topic-prefix", p.Prefix, "-from", "end", "-session", sid, "-idle-exit", "2s"); len(end) != 0 {
			t.Fatalf("tap -from end printed %d old events", len(end))
		}
	})

	t.Run("tail prints what the user receives, once and in order", func(t *testing.T) {
		var tout bytes.Buffer
		done := make(chan error, 1)
		go func() {
			done <- tail(ctx, &tout, append(conn, "-user", bob, "-session", sid, "-history", "-n", "5", "-idle-exit", "30s"))
		}()
		time.Sleep(time.Second) // connected and caught up, so "four" comes live or by sync alike
		var sout bytes.Buffer
		if err := send(ctx, nil, &sout, append(conn, "-user", alice, "-session", sid, "four")); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		var evs []struct {
			Seq  int64           `json:"seq"`
			Kind string          `json:"kind"`
			Body json.RawMessage `json:"body"`
		}
		for _, l := range lines(t, tout.String()) {
			var e struct {
				Seq  int64           `json:"seq"`
				Kind string          `json:"kind"`
				Body json.RawMessage `json:"body"`
			}
			if err := json.Unmarshal([]byte(l), &e); err != nil {
				t.Fatalf("tail printed %q: %v", l, err)
			}
			evs = append(evs, e)
		}
		if len(evs) != 5 || evs[0].Kind != "session_create" || string(evs[4].Body) != `"four"` {
			t.Fatalf("tail printed %+v, want the create, one two three, four", evs)
		}
		for i := 1; i < len(evs); i++ {
			if evs[i].Seq <= evs[i-1].Seq {
				t.Fatalf("tail out of order: %+v", evs)
			}
		}
	})

	t.Run("chat sends each line and marks read", func(t *testing.T) {
		var cout bytes.Buffer
		if err := chat(ctx, strings.NewReader("hello from chat\n/read\n"), &cout, append(conn, "-user", bob, "-session", sid)); err != nil {
			t.Fatal(err)
		}
		s := cout.String()
		for _, want := range []string{"-- " + bob + " in " + sid, alice + ": three", "-- read up to seq"} {
			if !strings.Contains(s, want) {
				t.Fatalf("chat transcript has no %q:\n%s", want, s)
			}
		}
		deadline := time.Now().Add(20 * time.Second)
		for {
			var n int
			_ = p.Pool.QueryRow(ctx, `SELECT count(*) FROM messages WHERE session_id = $1 AND sender_user_id = $2 AND body = $3`, sid, bob, []byte("hello from chat")).Scan(&n)
			if n == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("chat line stored %d times, want once", n)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("load writes a table, JSON and a plot", func(t *testing.T) {
		dir := t.TempDir()
		js, plot := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.html")
		var lout, lerr bytes.Buffer
		err := loadCmd(ctx, &lout, &lerr, []string{"-gateways", gw.URL, "-secret", clienttest.Secret, "-users", "3", "-sessions", "2",
			"-group-size", "3", "-rate", "40", "-duration", "1s", "-drain", "15s", "-json", js, "-plot", plot})
		if err != nil {
			t.Fatalf("%v\n%s", err, lout.String())
		}
		if !strings.Contains(lout.String(), "send→ACK") || !strings.Contains(lout.String(), "lost") {
			t.Fatalf("no table:\n%s", lout.String())
		}
		b, err := os.ReadFile(js)
		if err != nil {
			t.Fatal(err)
		}
		var rep map[string]any
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatal(err)
		}
		if rep["sent"].(float64) < 20 || rep["sent"] != rep["acked"] || rep["lost"].(float64) != 0 {
			t.Fatalf("report %s", b)
		}
		h, err := os.ReadFile(plot)
		if err != nil || !bytes.Contains(h, []byte("<svg")) {
			t.Fatalf("plot: %v", err)
		}
		if lerr.Len() != 0 {
			t.Fatalf("progress bar drawn on a non-terminal: %q", lerr.String())
		}
	})
}

type tapped struct {
	line tapJSONLine
	ev   *imv1.SequencedEvent
}

// tapJSONLine is one line of tap's json format, as a reader parses it.
type tapJSONLine struct {
	Topic         string            `json:"topic"`
	Partition     int32             `json:"partition"`
	Offset        int64             `json:"offset"`
	TimestampMs   int64             `json:"timestamp_ms"`
	Key           string            `json:"key"`
	KeyEncoding   string            `json:"key_encoding"`
	Type          string            `json:"type"`
	Schema        string            `json:"schema"`
	Headers       map[string]string `json:"headers"`
	Event         json.RawMessage   `json:"event"`
	Error         string            `json:"error"`
	Value         string            `json:"value"`
	ValueEncoding string            `json:"value_encoding"`
}

// tapEvents runs tap (json format) on sequenced events and decodes its
// lines back into events.
func tapEvents(t *testing.T, ctx context.Context, args ...string) []tapped {
	t.Helper()
	var got []tapped
	for _, tl := range tapJSON(t, ctx, args...) {
		ev := &imv1.SequencedEvent{}
		if err := fromTapJSON(tl.Event, ev); err != nil {
			t.Fatalf("tap event %s: %v", tl.Event, err)
		}
		got = append(got, tapped{tl, ev})
	}
	return got
}

// tapJSON runs tap and parses its json lines.
func tapJSON(t *testing.T, ctx context.Context, args ...string) []tapJSONLine {
	t.Helper()
	var out bytes.Buffer
	if err := tap(ctx, &out, args); err != nil {
		t.Fatal(err)
	}
	return parseTapJSON(t, out.Bytes())
}

func parseTapJSON(t *testing.T, out []byte) []tapJSONLine {
	t.Helper()
	var got []tapJSONLine
	for _, l := range lines(t, string(out)) {
		var tl tapJSONLine
		if err := json.Unmarshal([]byte(l), &tl); err != nil {
			t.Fatalf("tap printed %q: %v", l, err)
		}
		got = append(got, tl)
	}
	return got
}

// fromTapJSON reads an event object of tap's json format back into m: the
// inverse of appendMessage, so tests can show that the format loses
// nothing. It turns the object into protobuf's JSON (text bytes to
// base64, markers dropped) and lets protojson read that.
func fromTapJSON(event []byte, m proto.Message) error {
	d := json.NewDecoder(bytes.NewReader(event))
	d.UseNumber() // 64-bit integers stay exact
	var obj map[string]any
	if err := d.Decode(&obj); err != nil {
		return err
	}
	pj, err := toProtoJSON(obj, m.ProtoReflect().Descriptor())
	if err != nil {
		return err
	}
	b, err := json.Marshal(pj)
	if err != nil {
		return err
	}
	return protojson.Unmarshal(b, m)
}

func toProtoJSON(obj map[string]any, md protoreflect.MessageDescriptor) (map[string]any, error) {
	out := map[string]any{}
	for k, v := range obj {
		if name, ok := strings.CutSuffix(k, "_encoding"); ok && md.Fields().ByName(protoreflect.Name(name)) != nil {
			if v != "base64" {
				return nil, fmt.Errorf("%s = %v, want base64", k, v)
			}
			if _, ok := obj[name]; !ok {
				return nil, fmt.Errorf("%s without %s", k, name)
			}
			continue
		}
		fd := md.Fields().ByName(protoreflect.Name(k))
		if fd == nil {
			return nil, fmt.Errorf("%s has no field %q", md.FullName(), k)
		}
		b64 := obj[k+"_encoding"] == "base64"
		var err error
		switch {
		case fd.IsList():
			l, _ := v.([]any)
			conv := make([]any, len(l))
			for i, e := range l {
				if conv[i], err = fromTapValue(fd, e, b64); err != nil {
					return nil, err
				}
			}
			out[k] = conv
		case fd.IsMap():
			mp, _ := v.(map[string]any)
			conv := map[string]any{}
			for mk, e := range mp {
				if conv[mk], err = fromTapValue(fd.MapValue(), e, b64); err != nil {
					return nil, err
				}
			}
			out[k] = conv
		default:
			if out[k], err = fromTapValue(fd, v, b64); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

func fromTapValue(fd protoreflect.FieldDescriptor, v any, b64 bool) (any, error) {
	switch fd.Kind() {
	case protoreflect.MessageKind:
		obj, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: %v is not an object", fd.FullName(), v)
		}
		return toProtoJSON(obj, fd.Message())
	case protoreflect.BytesKind:
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("%s: %v is not a string", fd.FullName(), v)
		}
		if b64 {
			return s, nil
		}
		return base64.StdEncoding.EncodeToString([]byte(s)), nil
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if _, ok := v.(json.Number); !ok {
			return nil, fmt.Errorf("%s: %v is not a JSON number", fd.FullName(), v)
		}
	}
	return v, nil
}

func lines(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			out = append(out, l)
		}
	}
	return out
}

func TestTapStart(t *testing.T) {
	cases := []struct {
		from  string
		parts map[int32]int64
		err   bool
	}{
		{from: "start"}, {from: "end"}, {from: "2026-01-02T03:04:05Z"}, {from: "offset:17"},
		{from: "offset:0=5,3=9", parts: map[int32]int64{0: 5, 3: 9}},
		{from: "offset:-1", err: true}, {from: "offset:1=x", err: true}, {from: "offset:", err: true}, {from: "yesterday", err: true},
	}
	for _, c := range cases {
		t.Run(c.from, func(t *testing.T) {
			_, parts, err := tapStart(c.from)
			if (err != nil) != c.err {
				t.Fatalf("err = %v, want error %v", err, c.err)
			}
			if len(parts) != len(c.parts) {
				t.Fatalf("partitions %v, want %v", parts, c.parts)
			}
			for p, n := range c.parts {
				if parts[p] != kgo.NewOffset().At(n) {
					t.Fatalf("partition %d starts at %v, want %d", p, parts[p], n)
				}
			}
		})
	}
}
