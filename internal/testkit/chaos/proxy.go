package chaos

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"time"
)

// proxy sits between the load's clients and the gateways. It forwards
// bytes unchanged and reads the WebSocket frames as they pass, so the
// suite knows exactly what every client was told: each ok ACK and
// seq_notice with its seq (the acked set the final checks compare with
// the log and the store), and which commands are in flight through which
// gateway (so a gateway can be killed while clients are mid-send).
//
// A proxy prefers one gateway and dials the others when it is down, so
// clients of a dead gateway move to a live one on their next reconnect.
// The handshake's Sec-WebSocket-Extensions header is dropped: frames must
// stay uncompressed to be readable (seqflow's gateway does not compress).
type proxy struct {
	ln        net.Listener
	upstreams []string // preferred first
	book      *ackBook
	gwIndex   func(addr string) int

	wg    sync.WaitGroup
	mu    sync.Mutex
	conns map[net.Conn]bool
}

func newProxy(book *ackBook, upstreams []string, gwIndex func(string) int) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("proxy listen: %w", err)
	}
	return &proxy{ln: ln, upstreams: upstreams, book: book, gwIndex: gwIndex, conns: map[net.Conn]bool{}}, nil
}

// URL is the WebSocket URL clients dial.
func (p *proxy) URL() string { return "ws://" + p.ln.Addr().String() }

// Run accepts until ctx ends, then closes every connection and returns
// ctx.Err() once they are done.
func (p *proxy) Run(ctx context.Context) error {
	go func() { <-ctx.Done(); p.ln.Close() }()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			p.mu.Lock()
			for c := range p.conns {
				c.Close()
			}
			p.mu.Unlock()
			p.wg.Wait()
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("proxy accept: %w", err)
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

func (p *proxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
}

// handshake hands the client's upgrade request to the first gateway that
// answers it within a few seconds, preferred first (a SIGSTOPped gateway
// accepts TCP connections but answers nothing), and returns the
// connection, its reader and the gateway's response head.
func (p *proxy) handshake(head []byte) (net.Conn, *bufio.Reader, []byte, string, error) {
	var errs []error
	for _, a := range p.upstreams {
		up, err := net.DialTimeout("tcp", a, time.Second)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_ = up.SetDeadline(time.Now().Add(5 * time.Second))
		ur := bufio.NewReaderSize(up, 64<<10)
		var resp []byte
		if _, err = up.Write(stripHeader(head, "Sec-WebSocket-Extensions")); err == nil {
			resp, err = readHead(ur)
		}
		if err != nil {
			up.Close()
			errs = append(errs, fmt.Errorf("handshake with %s: %w", a, err))
			continue
		}
		_ = up.SetDeadline(time.Time{})
		return up, ur, resp, a, nil
	}
	return nil, nil, nil, "", errors.Join(errs...)
}

func (p *proxy) serve(client net.Conn) {
	p.track(client, true)
	defer p.track(client, false)
	defer client.Close()
	cr := bufio.NewReaderSize(client, 64<<10)
	_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
	head, err := readHead(cr)
	if err != nil {
		return
	}
	_ = client.SetReadDeadline(time.Time{})
	up, ur, resp, addr, err := p.handshake(head)
	if err != nil {
		return // the client sees a closed connection and retries
	}
	p.track(up, true)
	defer p.track(up, false)
	defer up.Close()
	if _, err := client.Write(resp); err != nil {
		return
	}
	cs := p.book.open(p.gwIndex(addr))
	defer p.book.close(cs)
	if !bytes.HasPrefix(resp, []byte("HTTP/1.1 101")) {
		// Not upgraded (an auth error, say): pass the rest through.
		go func() { _, _ = io.Copy(up, cr); up.Close() }()
		_, _ = io.Copy(client, ur)
		return
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = pump(up, cr, func(b []byte) { p.book.fromClient(cs, b) })
		up.Close()
	}()
	_ = pump(client, ur, func(b []byte) { p.book.fromServer(cs, b) })
	client.Close()
	up.Close()
	<-done
}

// readHead reads an HTTP head up to and including the blank line.
func readHead(r *bufio.Reader) ([]byte, error) {
	var b bytes.Buffer
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return nil, err
		}
		b.Write(line)
		if b.Len() > 32<<10 {
			return nil, errors.New("http head over 32 KiB")
		}
		if len(line) <= 2 && strings.TrimSpace(string(line)) == "" {
			return b.Bytes(), nil
		}
	}
}

// stripHeader removes every header line named name from an HTTP head.
func stripHeader(head []byte, name string) []byte {
	var out bytes.Buffer
	for _, line := range bytes.SplitAfter(head, []byte("\n")) {
		if k, _, ok := bytes.Cut(line, []byte(":")); ok && strings.EqualFold(strings.TrimSpace(string(k)), name) {
			continue
		}
		out.Write(line)
	}
	return out.Bytes()
}

// maxMessage bounds a message the proxy reads for itself; larger ones are
// forwarded unread (the load never sends any).
const maxMessage = 1 << 20

// pump copies WebSocket frames from r to w, calling msg with the payload
// of every complete text message (unmasked, fragments joined) before its
// last frame is forwarded. It returns when either side fails.
func pump(w io.Writer, r *bufio.Reader, msg func([]byte)) error {
	fr := frameReader{r: r}
	for {
		raw, err := fr.next()
		if err == nil {
			// Before forwarding: a command is booked before the gateway
			// can answer it, an answer before the client can act on it.
			if m := fr.message(); m != nil {
				msg(m)
			}
		}
		if len(raw) > 0 {
			if _, werr := w.Write(raw); werr != nil {
				return werr
			}
		}
		if err != nil {
			return err
		}
	}
}

// frameReader splits a WebSocket byte stream (RFC 6455) into frames and
// joins fragmented text messages. It is fed by the network, so every
// length is checked before it is trusted.
type frameReader struct {
	r       *bufio.Reader
	raw     []byte
	text    []byte // the text message being joined
	inText  bool
	tooBig  bool
	done    []byte // a complete message, handed out by message()
	hasDone bool
}

// errFrameTooLarge stops a stream whose frame claims more than maxFrame.
var errFrameTooLarge = errors.New("websocket frame over 16 MiB")

const maxFrame = 16 << 20

// next reads one frame and returns its raw bytes (header and payload as
// received).
func (f *frameReader) next() ([]byte, error) {
	f.raw = f.raw[:0]
	f.hasDone = false
	var h [14]byte
	if _, err := io.ReadFull(f.r, h[:2]); err != nil {
		return nil, err
	}
	fin, op := h[0]&0x80 != 0, h[0]&0x0f
	masked, n := h[1]&0x80 != 0, uint64(h[1]&0x7f)
	hl := 2
	switch n {
	case 126:
		if _, err := io.ReadFull(f.r, h[2:4]); err != nil {
			return nil, err
		}
		n, hl = uint64(binary.BigEndian.Uint16(h[2:4])), 4
	case 127:
		if _, err := io.ReadFull(f.r, h[2:10]); err != nil {
			return nil, err
		}
		n, hl = binary.BigEndian.Uint64(h[2:10]), 10
	}
	var key []byte
	if masked {
		if _, err := io.ReadFull(f.r, h[hl:hl+4]); err != nil {
			return nil, err
		}
		key = h[hl : hl+4]
		hl += 4
	}
	if n > maxFrame {
		return append(f.raw, h[:hl]...), errFrameTooLarge
	}
	f.raw = append(f.raw, h[:hl]...)
	start := len(f.raw)
	f.raw = append(f.raw, make([]byte, n)...)
	if _, err := io.ReadFull(f.r, f.raw[start:]); err != nil {
		return f.raw[:start], err
	}
	payload := f.raw[start:]
	if op >= 0x8 { // control frame: ping, pong, close
		return f.raw, nil
	}
	switch {
	case op == 0x1: // text
		f.inText, f.tooBig, f.text = true, false, f.text[:0]
	case op == 0x0 && f.inText: // continuation of a text message
	default: // binary, or a stray continuation
		f.inText = false
		return f.raw, nil
	}
	if len(f.text)+len(payload) > maxMessage {
		f.tooBig = true
	}
	if !f.tooBig {
		off := len(f.text)
		f.text = append(f.text, payload...)
		if masked {
			for i := range payload {
				f.text[off+i] ^= key[i%4]
			}
		}
	}
	if fin {
		f.inText = false
		if !f.tooBig {
			f.done, f.hasDone = f.text, true
		}
	}
	return f.raw, nil
}

// message returns the text message the last frame completed, or nil.
func (f *frameReader) message() []byte {
	if !f.hasDone {
		return nil
	}
	return f.done
}

// wireFrame is the part of a client or server frame the suite reads.
type wireFrame struct {
	Op          string `json:"op"`
	ClientMsgID string `json:"client_msg_id"`
	SessionID   string `json:"session_id"`
	Status      string `json:"status"`
	Seq         int64  `json:"seq"`
	MsgID       string `json:"msg_id"`
	Duplicate   bool   `json:"duplicate"`
}

// Acked is a command the gateway answered with a seq: what the client was
// told, whatever happened afterwards.
type Acked struct {
	SessionID   string
	ClientMsgID string
	Op          string // the command: send, create_session, ...
	Seq         int64
	MsgID       string
	// Acks counts the ok answers (retries are answered again, with
	// duplicate set); Conflict says two answers named different seqs or
	// message IDs.
	Acks     int
	Conflict bool
}

// ackBook collects, over every proxied connection, the commands sent and
// the seqs they were told.
type ackBook struct {
	mu       sync.Mutex
	acked    map[[2]string]*Acked // (session_id, client_msg_id)
	ops      map[string]string    // client_msg_id → op of its first send
	inFlight []int                // per gateway: commands forwarded, not yet answered
	conns    int
	frames   int64
	bad      int64 // text messages that were not JSON
}

// connState is one proxied connection's commands awaiting an answer.
type connState struct {
	gw      int
	pending map[string]bool
}

func newAckBook(gateways int) *ackBook {
	return &ackBook{acked: map[[2]string]*Acked{}, ops: map[string]string{}, inFlight: make([]int, gateways)}
}

func (b *ackBook) open(gw int) *connState {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.conns++
	return &connState{gw: gw, pending: map[string]bool{}}
}

// close forgets the connection's pending commands: the client resends
// them on its next connection, wherever that is.
func (b *ackBook) close(cs *connState) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cs.gw >= 0 && cs.gw < len(b.inFlight) {
		b.inFlight[cs.gw] -= len(cs.pending)
	}
	cs.pending = nil
}

func isCommand(op string) bool {
	switch op {
	case "send", "edit", "recall", "create_session", "members", "group":
		return true
	}
	return false
}

func (b *ackBook) fromClient(cs *connState, m []byte) {
	var f wireFrame
	if json.Unmarshal(m, &f) != nil {
		b.mu.Lock()
		b.bad++
		b.mu.Unlock()
		return
	}
	if !isCommand(f.Op) || f.ClientMsgID == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.frames++
	if _, ok := b.ops[f.ClientMsgID]; !ok {
		b.ops[f.ClientMsgID] = f.Op
	}
	if cs.pending != nil && !cs.pending[f.ClientMsgID] {
		cs.pending[f.ClientMsgID] = true
		if cs.gw >= 0 && cs.gw < len(b.inFlight) {
			b.inFlight[cs.gw]++
		}
	}
}

func (b *ackBook) fromServer(cs *connState, m []byte) {
	// Events are most of the traffic; only answers name a status.
	if !bytes.Contains(m, []byte(`"client_msg_id"`)) || bytes.HasPrefix(m, []byte(`{"op":"event"`)) {
		return
	}
	var f wireFrame
	if json.Unmarshal(m, &f) != nil {
		b.mu.Lock()
		b.bad++
		b.mu.Unlock()
		return
	}
	answer := f.Op == "error" || (f.Op == "ack" && f.Status == "ok") || f.Op == "seq_notice"
	if !answer || f.ClientMsgID == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.frames++
	if cs.pending != nil && cs.pending[f.ClientMsgID] {
		delete(cs.pending, f.ClientMsgID)
		if cs.gw >= 0 && cs.gw < len(b.inFlight) {
			b.inFlight[cs.gw]--
		}
	}
	if f.Op == "error" || f.Seq <= 0 || f.SessionID == "" {
		return
	}
	k := [2]string{f.SessionID, f.ClientMsgID}
	a := b.acked[k]
	if a == nil {
		a = &Acked{SessionID: f.SessionID, ClientMsgID: f.ClientMsgID, Op: b.ops[f.ClientMsgID], Seq: f.Seq, MsgID: f.MsgID}
		b.acked[k] = a
	} else if a.Seq != f.Seq || a.MsgID != f.MsgID {
		a.Conflict = true
	}
	a.Acks++
}

// InFlight returns the commands forwarded to gateway gw and not answered
// on a connection that is still open.
func (b *ackBook) InFlight(gw int) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	if gw < 0 || gw >= len(b.inFlight) {
		return 0
	}
	return b.inFlight[gw]
}

// Acked returns a copy of every acked command.
func (b *ackBook) Acked() []Acked {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]Acked, 0, len(b.acked))
	for _, a := range b.acked {
		out = append(out, *a)
	}
	return out
}

// Stats returns connections opened, command frames seen and unreadable
// messages.
func (b *ackBook) Stats() (conns int, frames, bad int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.conns, b.frames, b.bad
}
