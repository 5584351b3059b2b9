package delivery

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/peerauth"
)

func ring(t testing.TB, entries ...string) *peerauth.Keyring {
	t.Helper()
	var s string
	for _, e := range entries {
		s += e + "\n"
	}
	k, err := peerauth.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// handshake runs both sides over a pipe and returns their errors.
func handshake(t *testing.T, sender, gateway *peerauth.Keyring, want, is string) (cerr, serr error) {
	t.Helper()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	_ = a.SetDeadline(time.Now().Add(5 * time.Second))
	_ = b.SetDeadline(time.Now().Add(5 * time.Second))
	done := make(chan error, 1)
	go func() {
		_, err := serverHandshake(b, gateway, is)
		if err != nil {
			b.Close()
		}
		done <- err
	}()
	_, cerr = clientHandshake(a, sender, want)
	if cerr != nil {
		a.Close()
	}
	return cerr, <-done
}

// TestHandshake: the table of who may talk to whom. Only a sender and a
// gateway that share a key, with the sender wanting that gateway, get
// through; every other case is refused on the side that can tell, with
// the reason the gateway counts.
func TestHandshake(t *testing.T) {
	k1, k2, k3 := peerauth.NewEntry("k1"), peerauth.NewEntry("k2"), peerauth.NewEntry("k1")
	cases := []struct {
		name            string
		sender, gateway *peerauth.Keyring
		want            string
		senderErr       error
		reason          string
	}{
		{"same ring", ring(t, k1), ring(t, k1), "gw", nil, ""},
		{"rotation: sender signs with the gateway's second key", ring(t, k2, k1), ring(t, k1, k2), "gw", nil, ""},
		{"gateway lacks the sender's key", ring(t, k2), ring(t, k1), "gw", ErrPeerAuth, RejectUnknownKey},
		// The sender finds the gateway's proof wrong first and hangs up.
		{"same key id, another secret", ring(t, k3), ring(t, k1), "gw", ErrPeerAuth, RejectHandshake},
		{"listener is another gateway", ring(t, k1), ring(t, k1), "other", ErrNoReceiver, RejectWrongGateway},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cerr, serr := handshake(t, c.sender, c.gateway, c.want, "gw")
			if c.senderErr == nil {
				if cerr != nil || serr != nil {
					t.Fatalf("handshake refused: sender %v, gateway %v", cerr, serr)
				}
				return
			}
			if got := rejectReason(serr); got != c.reason {
				t.Fatalf("gateway refused with %q (%v), want %q", got, serr, c.reason)
			}
			if !errors.Is(cerr, c.senderErr) {
				t.Fatalf("sender: %v, want %v", cerr, c.senderErr)
			}
		})
	}
}

// TestHandshakeImpostorGateway: a listener holding another secret under
// the same key ID cannot prove itself; the sender refuses before it sends
// a frame.
func TestHandshakeImpostorGateway(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	_ = a.SetDeadline(time.Now().Add(5 * time.Second))
	_ = b.SetDeadline(time.Now().Add(5 * time.Second))
	go func() { _, _ = serverHandshake(b, ring(t, peerauth.NewEntry("k")), "gw") }()
	_, err := clientHandshake(a, ring(t, peerauth.NewEntry("k")), "gw")
	if !errors.Is(err, ErrPeerAuth) {
		t.Fatalf("sender accepted an impostor: %v", err)
	}
}

// TestHandshakeForgedProof: a stranger that knows a key ID but not its
// key, and ignores the gateway's proof, is refused at its own proof.
func TestHandshakeForgedProof(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	_ = a.SetDeadline(time.Now().Add(5 * time.Second))
	_ = b.SetDeadline(time.Now().Add(5 * time.Second))
	go func() {
		_, _ = a.Write(append([]byte("SQFP\x01\x01k\x02gw"), make([]byte, nonceSize)...))
		_, _ = io.ReadFull(a, make([]byte, 5+nonceSize+MACSize))
		_, _ = a.Write(make([]byte, MACSize))
	}()
	_, err := serverHandshake(b, ring(t, peerauth.NewEntry("k")), "gw")
	if rejectReason(err) != RejectBadMAC {
		t.Fatalf("gateway: %v, want %s", err, RejectBadMAC)
	}
}

// TestPubSubOpen: a sealed message opens once, for its gateway, within
// the clock window, under a key of the ring.
func TestPubSubOpen(t *testing.T) {
	k := ring(t, peerauth.NewEntry("k"))
	now := time.Unix(1_800_000_000, 0)
	s := newSealer(k)
	s.now = func() time.Time { return now }
	seal := func(gw string) []byte {
		m, err := s.seal(gw, []byte("batch"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	newO := func(keys *peerauth.Keyring, gw string, at time.Time) *opener {
		o := newOpener(keys, gw)
		o.now = func() time.Time { return at }
		return o
	}
	t.Run("good", func(t *testing.T) {
		p, err := newO(k, "gw", now).open(seal("gw"))
		if err != nil || string(p) != "batch" {
			t.Fatalf("open: %q, %v", p, err)
		}
	})
	cases := []struct {
		name   string
		o      *opener
		m      []byte
		reason string
	}{
		{"another gateway", newO(k, "gw2", now), seal("gw"), RejectWrongGateway},
		{"another ring", newO(ring(t, peerauth.NewEntry("k")), "gw", now), seal("gw"), RejectBadMAC},
		{"unknown key", newO(ring(t, peerauth.NewEntry("j")), "gw", now), seal("gw"), RejectUnknownKey},
		{"too late", newO(k, "gw", now.Add(PubSubWindow+time.Second)), seal("gw"), RejectStale},
		{"from the future", newO(k, "gw", now.Add(-PubSubWindow-time.Second)), seal("gw"), RejectStale},
		{"flipped byte", newO(k, "gw", now), func() []byte { m := seal("gw"); m[len(m)-MACSize-1] ^= 1; return m }(), RejectBadMAC},
		{"unsealed", newO(k, "gw", now), []byte("batch"), RejectHandshake},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := c.o.open(c.m)
			if got := rejectReason(err); got != c.reason {
				t.Fatalf("refused with %q (%v), want %q", got, err, c.reason)
			}
		})
	}
	t.Run("replay", func(t *testing.T) {
		o := newO(k, "gw", now)
		m1, m2 := seal("gw"), seal("gw")
		for _, m := range [][]byte{m2, m1} { // out of order is fine
			if _, err := o.open(m); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := o.open(m1); rejectReason(err) != RejectReplay {
			t.Fatalf("replay: %v", err)
		}
	})
}

func TestReplayWindow(t *testing.T) {
	var w replayWindow
	for _, c := range []struct {
		ctr  uint64
		want bool
	}{{5, true}, {5, false}, {3, true}, {3, false}, {5000, true}, {5000 - replayWindowBits, false}, {5000 - replayWindowBits + 1, true}, {4999, true}, {4999, false}} {
		if got := w.accept(c.ctr); got != c.want {
			t.Fatalf("accept(%d) = %v, want %v", c.ctr, got, c.want)
		}
	}
}

// FuzzServerHandshake: the gateway's side of the handshake reads bytes
// from strangers; it must never panic or accept without the sender proof.
func FuzzServerHandshake(f *testing.F) {
	k := ring(f, "k:"+string(bytes.Repeat([]byte("A"), 44)))
	f.Add([]byte("SQFP\x01\x01k\x02gw0123456789abcdef"))
	f.Add([]byte("SQFP\x01\xffk"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		rw := struct {
			io.Reader
			io.Writer
		}{bytes.NewReader(in), io.Discard}
		if _, err := serverHandshake(rw, k, "gw"); err == nil {
			t.Fatalf("handshake accepted %q", in)
		}
	})
}

// FuzzPubSubOpen: pub/sub messages come from whoever can publish to Redis.
func FuzzPubSubOpen(f *testing.F) {
	k := ring(f, "k:"+string(bytes.Repeat([]byte("A"), 44)))
	// Fixed clock and instance: every fuzz worker must seal the same bytes.
	at := time.Unix(1_800_000_000, 0)
	sl := newSealer(k)
	sl.instance, sl.now = [16]byte{}, func() time.Time { return at }
	good, _ := sl.seal("gw", []byte("x"))
	f.Add(good)
	f.Add([]byte("SQFR\x01"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		o := newOpener(k, "gw")
		o.now = func() time.Time { return at }
		p, err := o.open(in)
		if err == nil && !bytes.Equal(in, good) {
			t.Fatalf("opened a message that was not sealed: %q -> %q", in, p)
		}
	})
}
