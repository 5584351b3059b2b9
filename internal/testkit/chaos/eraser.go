package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	mrand "math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/seqflow/seqflow/client"
	"github.com/seqflow/seqflow/internal/auth"
)

// Erasures in the load: a fresh victim user takes part in real sessions
// with the load's users (a group it creates with two of them, a direct
// session with a third), has a few messages acked there through the
// proxies, and is then erased through a gateway's admin endpoint (POST
// /erase/user, docs/erasure.md) at the next fault's injection or after a
// few seconds, whichever comes first, retried while a fault makes it
// fail. Erasing at the injection puts erasures inside the faults (a
// key-store restart, a broker or gateway gone), not only between them.
// The victims are never the load's senders: the load's own guarantees are
// checked unchanged, and the erasures' at the end (checkErasures).

const (
	// victimSends is how many messages a victim sends to each of its
	// sessions, each acked before the next.
	victimSends = 3
	// eraseWithin bounds how long a victim's erasure is retried; one not
	// answered ok by then counts as not erased.
	eraseWithin = 3 * time.Minute
	// eraseActor is the actor the suite's erasures record: the name of
	// the eraser's operator token.
	eraseActor = "seqchaos-eraser"
)

// VictimSend is one message a victim was acked.
type VictimSend struct {
	Session     string `json:"session_id"`
	ClientMsgID string `json:"client_msg_id"`
	Seq         int64  `json:"seq"`
}

// Victim is one user made to be erased, and what became of it.
type Victim struct {
	User     string       `json:"user_id"`
	Sessions []string     `json:"sessions"`
	Sent     []VictimSend `json:"sent"`
	// SetupError: the victim could not take part in every session it
	// meant to (a fault outlasted the wait); it is erased all the same.
	SetupError string `json:"setup_error,omitempty"`
	// DuringFault is the fault kind whose injection set the erasure off
	// ("" when its timer did).
	DuringFault Kind `json:"during_fault,omitempty"`
	// Erased: a gateway answered the erasure ok, after Attempts calls and
	// EraseS seconds; EraseError is the last failed call's error. The
	// counts are the answers' (a call after a failed one counts what was
	// left to do).
	Erased        bool    `json:"erased"`
	Attempts      int     `json:"attempts"`
	EraseError    string  `json:"erase_error,omitempty"`
	EraseS        float64 `json:"erase_s"`
	KeysDestroyed int64   `json:"keys_destroyed"`
	SessionsLeft  int     `json:"sessions_left"`
	Transfers     int     `json:"ownership_transfers"`
}

// eraser makes and erases victims during the send phase.
type eraser struct {
	every  time.Duration
	signer *auth.Signer
	urls   []string // the proxies, so the victims' ACKs are booked
	admins []string // the gateways' admin addresses
	token  string   // the operator token named eraseActor
	pool   *pgxpool.Pool
	peers  []string // the load's users
	prefix string
	seed   uint64
	log    *slog.Logger
	hc     *http.Client

	faults chan Kind // injections, to erase at (faultInjected)

	mu      sync.Mutex
	victims []*Victim
}

// faultInjected tells the eraser a fault of kind k was just injected: the
// victim in hand is erased now (once it is ready), not at its timer. It
// never blocks.
func (e *eraser) faultInjected(k Kind) {
	if e == nil {
		return
	}
	select {
	case e.faults <- k:
	default:
	}
}

// run makes victims one after the other until until, each erased before
// the next is made; the victim in hand at until is still erased. It
// returns when the last erasure is done or ctx ends.
func (e *eraser) run(ctx context.Context, until time.Time) {
	rnd := mrand.New(mrand.NewPCG(e.seed, 29))
	for n := 1; time.Now().Before(until) && ctx.Err() == nil; n++ {
		v := &Victim{User: fmt.Sprintf("%s-v%04d", e.prefix, n)}
		e.mu.Lock()
		e.victims = append(e.victims, v)
		e.mu.Unlock()
		e.one(ctx, n, v, rnd)
		e.log.Info("victim", "user_id", v.User, "erased", v.Erased, "attempts", v.Attempts, "during_fault", string(v.DuringFault),
			"sends", len(v.Sent), "setup_error", v.SetupError, "err", v.EraseError)
	}
}

// done returns a copy of the victims so far.
func (e *eraser) done() []Victim {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([]Victim, 0, len(e.victims))
	for _, v := range e.victims {
		out = append(out, *v)
	}
	return out
}

// one takes victim v through its sessions and erases it. Writes to v
// hold e.mu: done reads it from another goroutine.
func (e *eraser) one(ctx context.Context, n int, v *Victim, rnd *mrand.Rand) {
	tok, err := e.signer.Mint(v.User, "victim", 2*time.Hour)
	if err != nil {
		e.set(func() { v.SetupError = err.Error() })
		return
	}
	urls := append(append([]string(nil), e.urls[n%len(e.urls):]...), e.urls[:n%len(e.urls)]...)
	c, err := client.New(client.Options{URLs: urls, Token: tok, SkipHistory: true,
		AckTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second, MaxBackoff: time.Second,
		Logger: e.log.With("user_id", v.User)})
	if err != nil {
		e.set(func() { v.SetupError = err.Error() })
		return
	}
	cctx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); _ = c.Run(cctx) }()
	stopClient := func() { stop(); <-ran }
	defer stopClient()

	if err := e.takePart(cctx, c, v, rnd); err != nil {
		e.set(func() { v.SetupError = err.Error() })
		// Nothing of the victim may still be in flight when it is
		// erased: a resend after the erasure would be refused, not lost,
		// but it would leave the victim's send unanswered.
		stopClient()
	}
	e.awaitStored(ctx, v)
	// Ready: erased e.every (±50%) from now, or at once when a fault is
	// injected meanwhile (one injected while it was made counts too: the
	// fault may still be on).
	select {
	case k := <-e.faults:
		e.set(func() { v.DuringFault = k })
	case <-time.After(time.Duration(float64(e.every) * (0.5 + rnd.Float64()))):
	case <-ctx.Done():
	}
	// The victim stays connected (unless its setup failed): the erasure
	// signs its device out and the gateway closes the connection.
	e.erase(ctx, n, v)
}

func (e *eraser) set(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f()
}

// takePart has v create a group with two of the load's users and open a
// direct session with a third, then send victimSends messages to each,
// every one acked before the next.
func (e *eraser) takePart(ctx context.Context, c *client.Client, v *Victim, rnd *mrand.Rand) error {
	p := rnd.Perm(len(e.peers))
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	a, err := c.CreateGroup(sctx, "erasure victim", e.peers[p[0]], e.peers[p[1]])
	if err != nil {
		return fmt.Errorf("create group: %w", err)
	}
	e.set(func() { v.Sessions = append(v.Sessions, a.SessionID) })
	d, err := c.OpenDirect(sctx, e.peers[p[2]])
	if err != nil {
		return fmt.Errorf("open direct: %w", err)
	}
	e.set(func() { v.Sessions = append(v.Sessions, d) })
	for _, s := range []string{a.SessionID, d} {
		for i := range victimSends {
			id := client.NewMessageID()
			ack, err := sendAcked(sctx, c, id, s, client.Text(fmt.Sprintf("victim %s message %d", v.User, i)))
			if err != nil {
				return fmt.Errorf("send to %s: %w", s, err)
			}
			e.set(func() { v.Sent = append(v.Sent, VictimSend{Session: s, ClientMsgID: id, Seq: ack.Seq}) })
		}
	}
	return nil
}

// sendAcked posts m with id until it is acked: a final error that is not
// the gateway's answer (the client closed) posts it again with the same
// ID, as the probe does.
func sendAcked(ctx context.Context, c *client.Client, id, session string, m client.Content) (client.Ack, error) {
	for {
		pend, err := c.PostWithID(ctx, id, session, m)
		if err != nil {
			return client.Ack{}, err
		}
		ack, err := pend.Wait(ctx)
		var se *client.ServerError
		switch {
		case err == nil:
			return ack, nil
		case ctx.Err() != nil, errors.As(err, &se):
			return client.Ack{}, err
		}
	}
}

// awaitStored waits (up to 2 minutes) until the store lists v as a member
// of each of its sessions: the erasure finds the sessions to leave in the
// store, so one not stored yet would not be left (docs/reliability.md).
func (e *eraser) awaitStored(ctx context.Context, v *Victim) {
	e.mu.Lock()
	sessions := append([]string(nil), v.Sessions...)
	e.mu.Unlock()
	if len(sessions) == 0 {
		return
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		qctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		var n int
		err := e.pool.QueryRow(qctx, `SELECT count(DISTINCT session_id) FROM session_members
			WHERE user_id = $1 AND left_seq IS NULL AND session_id = ANY($2)`, v.User, sessions).Scan(&n)
		cancel()
		if err == nil && n == len(sessions) {
			return
		}
		if sleep(ctx, 200*time.Millisecond) != nil {
			return
		}
	}
}

// eraseAnswer is the admin endpoint's JSON (erasure.Result.Report).
type eraseAnswer struct {
	KeysDestroyed int64 `json:"keys_destroyed"`
	SessionsLeft  int   `json:"sessions_left"`
	Transfers     int   `json:"ownership_transfers"`
}

// erase calls POST /erase/user on the gateways in turn, starting with
// the n-th, until one answers ok or eraseWithin passes. Running an
// erasure again is safe (docs/erasure.md): it finishes what a failed run
// left.
func (e *eraser) erase(ctx context.Context, n int, v *Victim) {
	began := time.Now()
	for i := 0; ; i++ {
		addr := e.admins[(n+i)%len(e.admins)]
		ans, err := e.call(ctx, addr, v.User)
		e.set(func() {
			v.Attempts++
			if err != nil {
				v.EraseError = err.Error()
				return
			}
			v.Erased, v.EraseError, v.EraseS = true, "", time.Since(began).Seconds()
			v.KeysDestroyed += ans.KeysDestroyed
			v.SessionsLeft += ans.SessionsLeft
			v.Transfers += ans.Transfers
		})
		if err == nil || time.Since(began) > eraseWithin || sleep(ctx, 500*time.Millisecond) != nil {
			return
		}
	}
}

// call is one POST /erase/user. A paused gateway answers nothing: the
// call gives up after 20s and the next gateway is tried.
func (e *eraser) call(ctx context.Context, addr, user string) (eraseAnswer, error) {
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	body, err := json.Marshal(map[string]string{"user_id": user})
	if err != nil {
		return eraseAnswer{}, err
	}
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, "http://"+addr+"/erase/user", bytes.NewReader(body))
	if err != nil {
		return eraseAnswer{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+e.token)
	resp, err := e.hc.Do(req)
	if err != nil {
		return eraseAnswer{}, fmt.Errorf("erase %s at %s: %w", user, addr, err)
	}
	defer resp.Body.Close()
	body, _ = io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	if resp.StatusCode != http.StatusOK {
		return eraseAnswer{}, fmt.Errorf("erase %s at %s: %s: %s", user, addr, resp.Status, strings.TrimSpace(string(body)))
	}
	var ans eraseAnswer
	if err := json.Unmarshal(body, &ans); err != nil {
		return eraseAnswer{}, fmt.Errorf("erase %s at %s: answer %q: %w", user, addr, body, err)
	}
	return ans, nil
}
