package delivery

import (
	"bytes"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"sync"
	"time"

	"github.com/seqflow/seqflow/internal/peerauth"
)

// Every peer on the push path proves it holds a key of the ring
// (internal/peerauth):
//
// The TCP stream opens with a mutual challenge–response, bound to the
// gateway ID the sender wants:
//
//	sender → gateway  "SQFP" 1 | len kid | kid | len gw | gw | nonce_s (16)
//	gateway → sender  "SQFP" status | nonce_g (16) | HMAC(k, "gateway", gw, kid, nonce_s, nonce_g)
//	sender → gateway  HMAC(k, "sender", gw, kid, nonce_s, nonce_g)
//
// status is 'K' (go on), 'G' (this listener is not gateway gw: a stale
// registry entry) or 'U' (the gateway lacks key kid), after which the
// gateway hangs up. The sender sends nothing until the gateway has proved
// it holds the key and answers to gw; the gateway reads no frame until the
// sender has proved the same. Each frame after it is
//
//	len (4, big-endian) | PushBatch | HMAC(session key, counter (8), PushBatch)
//
// with session key HMAC(k, "session", gw, kid, nonce_s, nonce_g) and
// counter the frame's index on the connection, so a frame replayed on
// another connection, to another gateway, or out of its place does not
// verify.
//
// A Redis pub/sub message has no connection to bind to; it carries its own
// freshness:
//
//	"SQFR" 1 | len kid | kid | len gw | gw | ts_ms (8) | instance (16) | counter (8) | PushBatch | HMAC(k, "pubsub", all before)
//
// The gateway refuses a message for another gateway, one whose ts_ms is
// further than PubSubWindow from its clock, and one whose (instance,
// counter) it has accepted before (a sliding window per sending process).

const (
	nonceSize     = 16
	streamMagic   = "SQFP"
	pubsubMagic   = "SQFR"
	protoVersion  = 1
	statusOK      = 'K'
	statusWrongGW = 'G'
	statusNoKey   = 'U'
)

// errStaleAddress is the handshake's answer of a listener that is another
// gateway: the registry entry predates it, and a fresh one may already be
// there.
var errStaleAddress = fmt.Errorf("%w: the listener is another gateway (a stale registry entry)", ErrNoReceiver)

// DefaultHandshakeTimeout bounds a TCP handshake, on both sides.
const DefaultHandshakeTimeout = 5 * time.Second

// PubSubWindow is how far a pub/sub message's timestamp may be from the
// receiving gateway's clock: it bounds both clock skew between peers and
// how long a captured message could be replayed were the receiver's
// replay memory lost (a restart).
const PubSubWindow = 30 * time.Second

func handshakeMAC(key []byte, label, gw, kid string, ns, ng []byte) []byte {
	return peerauth.MAC(key, []byte("seqflow push v1 "+label), []byte(gw), []byte(kid), ns, ng)
}

func newNonce() []byte {
	b := make([]byte, nonceSize)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return b
}

// frameMAC tags the frames of one direction of one stream.
type frameMAC struct {
	h   hash.Hash
	ctr uint64
	buf [MACSize]byte
}

// MACSize is the length of a frame's tag.
const MACSize = peerauth.MACSize

func newFrameMAC(key []byte, gw, kid string, ns, ng []byte) *frameMAC {
	return &frameMAC{h: hmac.New(sha256.New, handshakeMAC(key, "session", gw, kid, ns, ng))}
}

// next returns the tag of the next frame, payload.
func (f *frameMAC) next(payload []byte) []byte {
	var c [8]byte
	binary.BigEndian.PutUint64(c[:], f.ctr)
	f.ctr++
	f.h.Reset()
	f.h.Write(c[:])
	f.h.Write(payload)
	return f.h.Sum(f.buf[:0])
}

// clientHandshake runs the sender's side on rw: it proves key k and that
// the peer is gateway gw, and returns the frame tagger.
func clientHandshake(rw io.ReadWriter, keys *peerauth.Keyring, gw string) (*frameMAC, error) {
	kid := keys.SigningID()
	key, _ := keys.Key(kid)
	if len(gw) > 255 {
		return nil, fmt.Errorf("gateway id of %d bytes, limit 255", len(gw))
	}
	ns := newNonce()
	hello := make([]byte, 0, 8+len(kid)+len(gw)+nonceSize)
	hello = append(hello, streamMagic...)
	hello = append(hello, protoVersion, byte(len(kid)))
	hello = append(hello, kid...)
	hello = append(hello, byte(len(gw)))
	hello = append(hello, gw...)
	hello = append(hello, ns...)
	if _, err := rw.Write(hello); err != nil {
		return nil, fmt.Errorf("send handshake: %w", err)
	}
	var head [5]byte
	if _, err := io.ReadFull(rw, head[:]); err != nil {
		// A listener that hangs up at once is not a gateway of ours or is
		// going away: look the address up again.
		return nil, fmt.Errorf("%w: read handshake answer: %v", ErrNoReceiver, err)
	}
	// A listener that fails the handshake is no receiver of gw (a
	// ChainSender then tries pub/sub, which authenticates the gateway's
	// subscription by other means) and an impostor (ErrPeerAuth).
	if string(head[:4]) != streamMagic {
		return nil, fmt.Errorf("%w: %w: the listener is not a seqflow push receiver", ErrNoReceiver, ErrPeerAuth)
	}
	switch head[4] {
	case statusOK:
	case statusWrongGW:
		return nil, errStaleAddress
	case statusNoKey:
		return nil, fmt.Errorf("%w: %w: gateway %s does not hold key %q", ErrNoReceiver, ErrPeerAuth, gw, kid)
	default:
		return nil, fmt.Errorf("%w: %w: handshake status %q", ErrNoReceiver, ErrPeerAuth, head[4])
	}
	var ans [nonceSize + MACSize]byte
	if _, err := io.ReadFull(rw, ans[:]); err != nil {
		return nil, fmt.Errorf("%w: %w: read gateway proof: %v", ErrNoReceiver, ErrPeerAuth, err)
	}
	ng, proof := ans[:nonceSize], ans[nonceSize:]
	if !peerauth.Equal(proof, handshakeMAC(key, "gateway", gw, kid, ns, ng)) {
		return nil, fmt.Errorf("%w: %w: the listener could not prove it is gateway %s holding key %q", ErrNoReceiver, ErrPeerAuth, gw, kid)
	}
	if _, err := rw.Write(handshakeMAC(key, "sender", gw, kid, ns, ng)); err != nil {
		return nil, fmt.Errorf("send handshake proof: %w", err)
	}
	return newFrameMAC(key, gw, kid, ns, ng), nil
}

// rejectError is a receiver's refusal with its reason.
type rejectError struct {
	reason string
	err    error
}

func (e *rejectError) Error() string { return e.err.Error() }
func (e *rejectError) Unwrap() error { return e.err }

func reject(reason string, format string, args ...any) error {
	return &rejectError{reason: reason, err: fmt.Errorf("%w: "+format, append([]any{ErrPeerAuth}, args...)...)}
}

// rejectReason is the Reject* reason of err, "" when it is no refusal.
func rejectReason(err error) string {
	var re *rejectError
	if errors.As(err, &re) {
		return re.reason
	}
	return ""
}

// serverHandshake runs the gateway's side on rw: the peer must want
// gateway gw and prove a key of the ring. It returns the frame verifier.
func serverHandshake(rw io.ReadWriter, keys *peerauth.Keyring, gw string) (*frameMAC, error) {
	var head [6]byte
	if _, err := io.ReadFull(rw, head[:]); err != nil {
		return nil, reject(RejectHandshake, "read hello: %v", err)
	}
	if string(head[:4]) != streamMagic || head[4] != protoVersion {
		return nil, reject(RejectHandshake, "hello is not seqflow push v%d", protoVersion)
	}
	kid := make([]byte, head[5])
	if _, err := io.ReadFull(rw, kid); err != nil {
		return nil, reject(RejectHandshake, "read key id: %v", err)
	}
	var n [1]byte
	if _, err := io.ReadFull(rw, n[:]); err != nil {
		return nil, reject(RejectHandshake, "read gateway id: %v", err)
	}
	want := make([]byte, int(n[0])+nonceSize)
	if _, err := io.ReadFull(rw, want); err != nil {
		return nil, reject(RejectHandshake, "read gateway id: %v", err)
	}
	wantGW, ns := string(want[:n[0]]), want[n[0]:]
	if wantGW != gw {
		_, _ = rw.Write([]byte{'S', 'Q', 'F', 'P', statusWrongGW})
		return nil, reject(RejectWrongGateway, "sender wants gateway %q", wantGW)
	}
	key, ok := keys.Key(string(kid))
	if !ok {
		_, _ = rw.Write([]byte{'S', 'Q', 'F', 'P', statusNoKey})
		return nil, reject(RejectUnknownKey, "sender signs with key %q, not in the ring", kid)
	}
	ng := newNonce()
	ans := append([]byte{'S', 'Q', 'F', 'P', statusOK}, ng...)
	ans = append(ans, handshakeMAC(key, "gateway", gw, string(kid), ns, ng)...)
	if _, err := rw.Write(ans); err != nil {
		return nil, reject(RejectHandshake, "send proof: %v", err)
	}
	proof := make([]byte, MACSize)
	if _, err := io.ReadFull(rw, proof); err != nil {
		return nil, reject(RejectHandshake, "read sender proof: %v", err)
	}
	if !peerauth.Equal(proof, handshakeMAC(key, "sender", gw, string(kid), ns, ng)) {
		return nil, reject(RejectBadMAC, "sender could not prove key %q", kid)
	}
	return newFrameMAC(key, gw, string(kid), ns, ng), nil
}

// sealer wraps pub/sub messages of one sending process.
type sealer struct {
	keys     *peerauth.Keyring
	instance [16]byte
	mu       sync.Mutex
	ctr      uint64
	now      func() time.Time
}

func newSealer(keys *peerauth.Keyring) *sealer {
	s := &sealer{keys: keys, now: time.Now}
	copy(s.instance[:], newNonce())
	return s
}

// seal returns the pub/sub message of payload for gateway gw.
func (s *sealer) seal(gw string, payload []byte) ([]byte, error) {
	kid := s.keys.SigningID()
	key, _ := s.keys.Key(kid)
	if len(gw) > 255 {
		return nil, fmt.Errorf("gateway id of %d bytes, limit 255", len(gw))
	}
	s.mu.Lock()
	ctr := s.ctr
	s.ctr++
	s.mu.Unlock()
	m := make([]byte, 0, 8+len(kid)+len(gw)+32+len(payload)+MACSize)
	m = append(m, pubsubMagic...)
	m = append(m, protoVersion, byte(len(kid)))
	m = append(m, kid...)
	m = append(m, byte(len(gw)))
	m = append(m, gw...)
	m = binary.BigEndian.AppendUint64(m, uint64(s.now().UnixMilli()))
	m = append(m, s.instance[:]...)
	m = binary.BigEndian.AppendUint64(m, ctr)
	m = append(m, payload...)
	return append(m, peerauth.MAC(key, []byte("seqflow push v1 pubsub"), m)...), nil
}

// opener checks the pub/sub messages of one gateway.
type opener struct {
	keys    *peerauth.Keyring
	gw      string
	now     func() time.Time
	windows map[[16]byte]*replayWindow
	pruned  time.Time
}

func newOpener(keys *peerauth.Keyring, gw string) *opener {
	return &opener{keys: keys, gw: gw, now: time.Now, windows: map[[16]byte]*replayWindow{}}
}

// open returns the payload of message m, or a refusal (rejectError). It
// is not safe for concurrent use.
func (o *opener) open(m []byte) ([]byte, error) {
	if len(m) < 6 || !bytes.Equal(m[:4], []byte(pubsubMagic)) || m[4] != protoVersion {
		return nil, reject(RejectHandshake, "message is not seqflow pubsub v%d", protoVersion)
	}
	rest := m[5:]
	kidLen := int(rest[0])
	if len(rest) < 1+kidLen+1 {
		return nil, reject(RejectHandshake, "message cut short")
	}
	kid := string(rest[1 : 1+kidLen])
	rest = rest[1+kidLen:]
	gwLen := int(rest[0])
	if len(rest) < 1+gwLen+8+16+8+MACSize {
		return nil, reject(RejectHandshake, "message cut short")
	}
	gw := string(rest[1 : 1+gwLen])
	rest = rest[1+gwLen:]
	key, ok := o.keys.Key(kid)
	if !ok {
		return nil, reject(RejectUnknownKey, "message signed by key %q, not in the ring", kid)
	}
	body, tag := m[:len(m)-MACSize], m[len(m)-MACSize:]
	if !peerauth.Equal(tag, peerauth.MAC(key, []byte("seqflow push v1 pubsub"), body)) {
		return nil, reject(RejectBadMAC, "message MAC does not verify")
	}
	if gw != o.gw {
		return nil, reject(RejectWrongGateway, "message for gateway %q", gw)
	}
	ts := time.UnixMilli(int64(binary.BigEndian.Uint64(rest[:8])))
	now := o.now()
	if d := now.Sub(ts); d > PubSubWindow || d < -PubSubWindow {
		return nil, reject(RejectStale, "message stamped %s, %s from now", ts.UTC().Format(time.RFC3339Nano), d.Round(time.Millisecond))
	}
	var inst [16]byte
	copy(inst[:], rest[8:24])
	ctr := binary.BigEndian.Uint64(rest[24:32])
	w := o.windows[inst]
	if w == nil {
		w = &replayWindow{}
		o.windows[inst] = w
	}
	if !w.accept(ctr) {
		return nil, reject(RejectReplay, "message %d of sender %x seen before", ctr, inst[:4])
	}
	w.seen = now
	if now.Sub(o.pruned) > PubSubWindow {
		// A sender quiet for three windows cannot be replayed any more:
		// its messages are all stale by now.
		for k, v := range o.windows {
			if now.Sub(v.seen) > 3*PubSubWindow {
				delete(o.windows, k)
			}
		}
		o.pruned = now
	}
	return body[len(m)-len(rest)+32:], nil
}

// replayWindowBits is how far out of order a sender's messages may arrive
// (its partitions publish concurrently) and still be accepted.
const replayWindowBits = 4096

// replayWindow is RFC 4303's anti-replay window over one sender's counters.
type replayWindow struct {
	top  uint64 // highest counter accepted + 1; 0 = none yet
	bits [replayWindowBits / 64]uint64
	seen time.Time
}

func (w *replayWindow) accept(ctr uint64) bool {
	n := ctr + 1
	if n > w.top {
		shift := n - w.top
		if shift >= replayWindowBits {
			w.bits = [replayWindowBits / 64]uint64{}
		} else {
			for i := uint64(0); i < shift; i++ {
				w.clear(w.top + i)
			}
		}
		w.top = n
		w.set(ctr)
		return true
	}
	if w.top-n >= replayWindowBits || w.get(ctr) {
		return false
	}
	w.set(ctr)
	return true
}

func (w *replayWindow) idx(c uint64) (int, uint64) {
	i := c % replayWindowBits
	return int(i / 64), 1 << (i % 64)
}
func (w *replayWindow) get(c uint64) bool { i, b := w.idx(c); return w.bits[i]&b != 0 }
func (w *replayWindow) set(c uint64)      { i, b := w.idx(c); w.bits[i] |= b }
func (w *replayWindow) clear(c uint64)    { i, b := w.idx(c); w.bits[i] &^= b }
