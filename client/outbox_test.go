package client

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seqflow/seqflow/internal/wire"
)

func cmd(id string) *wire.ClientFrame {
	return &wire.ClientFrame{Op: wire.OpSend, ClientMsgID: id, SessionID: "s", Type: "text", Body: []byte(`"` + id + `"`)}
}

func ids(fs []*wire.ClientFrame) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.ClientMsgID)
	}
	return out
}

func TestOutbox(t *testing.T) {
	cases := []struct {
		name  string
		add   []string
		done  []string
		extra string // appended raw after the records
		want  []string
		err   string
	}{
		{name: "empty", want: nil},
		{name: "pending in posting order", add: []string{"a", "b", "c"}, want: []string{"a", "b", "c"}},
		{name: "done ones are gone", add: []string{"a", "b", "c"}, done: []string{"b"}, want: []string{"a", "c"}},
		{name: "a torn last line is ignored", add: []string{"a"}, extra: `{"add":{"op":"send","client_m`, want: []string{"a"}},
		{name: "a damaged line before the end is an error", add: []string{"a"}, extra: "garbage\n" + `{"done":"a"}` + "\n", err: "line 2"},
		{name: "done of an unknown ID is harmless", add: []string{"a"}, done: []string{"zz"}, want: []string{"a"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "ob")
			o, left, err := openOutbox(path)
			if err != nil || len(left) != 0 {
				t.Fatalf("open new: %v %v", left, err)
			}
			for _, id := range c.add {
				if err := o.add(cmd(id)); err != nil {
					t.Fatal(err)
				}
			}
			for _, id := range c.done {
				if err := o.done(id); err != nil {
					t.Fatal(err)
				}
			}
			if err := o.close(); err != nil {
				t.Fatal(err)
			}
			if c.extra != "" {
				f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
				_, _ = f.WriteString(c.extra)
				f.Close()
			}
			o2, left, err := openOutbox(path)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("open = %v, want an error naming %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer o2.close()
			if got := ids(left); !slices.Equal(got, c.want) {
				t.Fatalf("pending %v, want %v", got, c.want)
			}
			if string(left0Body(left)) != string(firstBody(c.want)) {
				t.Fatalf("body not kept: %s", left0Body(left))
			}
		})
	}
}

func left0Body(fs []*wire.ClientFrame) []byte {
	if len(fs) == 0 {
		return nil
	}
	return fs[0].Body
}

func firstBody(ids []string) []byte {
	if len(ids) == 0 {
		return nil
	}
	return []byte(`"` + ids[0] + `"`)
}

// TestOutboxCompacts: many done records are compacted away, and the live
// ones survive the rewrite.
func TestOutboxCompacts(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ob")
	o, _, err := openOutbox(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := o.add(cmd("keep")); err != nil {
		t.Fatal(err)
	}
	for i := range 3000 {
		id := "x" + strings.Repeat("y", i%7) + string(rune('a'+i%26)) + itoa(i)
		if err := o.add(cmd(id)); err != nil {
			t.Fatal(err)
		}
		if err := o.done(id); err != nil {
			t.Fatal(err)
		}
	}
	fi, _ := os.Stat(path)
	if fi.Size() > 200_000 {
		t.Fatalf("outbox is %d bytes after 3000 answered commands: not compacted", fi.Size())
	}
	o.close()
	_, left, err := openOutbox(path)
	if err != nil || !slices.Equal(ids(left), []string{"keep"}) {
		t.Fatalf("after compaction: %v %v", ids(left), err)
	}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{digits[i%10]}, b...)
	}
	return string(b)
}
