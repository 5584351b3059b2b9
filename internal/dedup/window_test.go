package dedup

import (
	"testing"
	"time"
)

func TestWindow(t *testing.T) {
	w := NewWindow(time.Second, 0)
	w.Put("s", "u", "a", Entry{Seq: 1, MsgID: 10, ServerTsMs: 1000}, 1000)
	if e, ok := w.Get("s", "u", "a", 1500); !ok || e.Seq != 1 || e.MsgID != 10 {
		t.Fatalf("Get inside window = %+v %v", e, ok)
	}
	if _, ok := w.Get("s", "u", "a", 2001); ok {
		t.Fatal("entry should have expired after the TTL")
	}
	if _, ok := w.Get("other", "u", "a", 1500); ok {
		t.Fatal("client_msg_id must be scoped by session")
	}
	if _, ok := w.Get("s", "v", "a", 1500); ok {
		t.Fatal("client_msg_id must be scoped by sender: another user's message got this one's seq")
	}
	// Another sender's message with the same client_msg_id is its own.
	w.Put("s", "v", "a", Entry{Seq: 9, MsgID: 90, ServerTsMs: 1100}, 1100)
	if e, _ := w.Get("s", "v", "a", 1300); e.Seq != 9 {
		t.Fatalf("the other sender's entry: %+v", e)
	}
	// A second Put of a live key keeps the first seq.
	w.Put("s", "u", "a", Entry{Seq: 2, MsgID: 20, ServerTsMs: 1200}, 1200)
	if e, _ := w.Get("s", "u", "a", 1300); e.Seq != 1 {
		t.Fatalf("second Put replaced the first seq: %+v", e)
	}
	// Expired entries are dropped as time moves on.
	w.Put("s", "u", "b", Entry{Seq: 3, ServerTsMs: 5000}, 5000)
	if w.Len() != 1 {
		t.Fatalf("Len after expiry = %d, want 1", w.Len())
	}
}

func TestWindowBound(t *testing.T) {
	w := NewWindow(time.Hour, 3)
	for i, id := range []string{"a", "b", "c", "d", "e"} {
		w.Put("s", "u", id, Entry{Seq: int64(i + 1), ServerTsMs: int64(i)}, int64(i))
	}
	if w.Len() != 3 || w.Evicted != 2 {
		t.Fatalf("Len = %d Evicted = %d, want 3 and 2", w.Len(), w.Evicted)
	}
	if _, ok := w.Get("s", "u", "a", 5); ok {
		t.Fatal("oldest entry should have been evicted")
	}
	if e, ok := w.Get("s", "u", "e", 5); !ok || e.Seq != 5 {
		t.Fatalf("newest entry lost: %+v %v", e, ok)
	}
}
