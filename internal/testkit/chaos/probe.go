package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/client"
	"github.com/seqflow/seqflow/internal/auth"
)

// probe measures recovery: a round posts one message in a session of every
// partition and completes when each is acknowledged with a seq, handed to
// the online recipient (by push or the SDK's sync) and stored. A fault's
// recovery is the time from the fault until a round started after it
// completes.
type probe struct {
	sender, recipient *client.Client
	sessions          []string // one per partition
	pgURL             string

	mu     sync.Mutex
	got    map[string]chan struct{} // client_msg_id → closed when the recipient has it
	rounds int
}

// newProbe connects two probe users through urls (the proxies) and creates
// groups until every one of partitions has one. run's goroutines stop with
// ctx.
func newProbe(ctx context.Context, wg *sync.WaitGroup, signer *auth.Signer, urls []string, prefix string,
	topic string, partitions int, pgURL string, log *slog.Logger) (*probe, error) {
	p := &probe{got: map[string]chan struct{}{}, pgURL: pgURL}
	mk := func(user string, urls []string, onEvent func(client.Event)) (*client.Client, error) {
		tok, err := signer.Mint(user, "probe", 48*time.Hour)
		if err != nil {
			return nil, err
		}
		c, err := client.New(client.Options{URLs: urls, Token: tok, OnEvent: onEvent, SkipHistory: true,
			AckTimeout: 5 * time.Second, RequestTimeout: 5 * time.Second, MaxBackoff: time.Second,
			ResyncInterval: 3 * time.Second, GapTimeout: 5 * time.Second, Logger: log.With("user_id", user)})
		if err != nil {
			return nil, err
		}
		wg.Go(func() {
			if err := c.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
				log.Warn("probe client stopped", "user_id", user, "err", err)
			}
		})
		return c, nil
	}
	rev := append([]string(nil), urls...)
	for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
		rev[i], rev[j] = rev[j], rev[i]
	}
	var err error
	if p.sender, err = mk(prefix+"-probe-s", urls, nil); err != nil {
		return nil, err
	}
	recipient := prefix + "-probe-r"
	if p.recipient, err = mk(recipient, rev, p.onEvent); err != nil {
		return nil, err
	}
	part := kgo.StickyKeyPartitioner(nil).ForTopic(topic)
	have := map[int]string{}
	cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for tries := 0; len(have) < partitions; tries++ {
		if tries > 50*partitions {
			return nil, fmt.Errorf("probe: %d groups cover only %d of %d partitions", tries, len(have), partitions)
		}
		a, err := p.sender.CreateGroup(cctx, "probe", recipient)
		if err != nil {
			return nil, fmt.Errorf("probe: create group: %w", err)
		}
		n := part.Partition(&kgo.Record{Key: []byte(a.SessionID)}, partitions)
		if _, ok := have[n]; !ok {
			have[n] = a.SessionID
			p.sessions = append(p.sessions, a.SessionID)
		}
	}
	return p, nil
}

func (p *probe) onEvent(e client.Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ch := p.got[e.ClientMsgID]; ch != nil {
		close(ch)
		delete(p.got, e.ClientMsgID)
	}
}

// stages says how long a round took to have every probe message acked,
// received by the recipient and stored.
type stages struct {
	Ack, Deliver, Store time.Duration
}

func (s stages) String() string {
	r := func(d time.Duration) float64 { return d.Seconds() }
	return fmt.Sprintf("ack %.1fs deliver %.1fs store %.1fs", r(s.Ack), r(s.Deliver), r(s.Store))
}

// round posts one message per probe session and waits until every one is
// acked, received and stored, or ctx ends.
func (p *probe) round(ctx context.Context) (st stages, err error) {
	began := time.Now()
	p.mu.Lock()
	p.rounds++
	n := p.rounds
	p.mu.Unlock()
	type one struct {
		session, id string
		pend        *client.Pending
		got         chan struct{}
	}
	var all []one
	for _, s := range p.sessions {
		id := client.NewMessageID()
		ch := make(chan struct{})
		p.mu.Lock()
		p.got[id] = ch
		p.mu.Unlock()
		pend, err := p.sender.PostWithID(ctx, id, s, client.Text(fmt.Sprintf("probe %d", n)))
		if err != nil {
			return st, fmt.Errorf("probe post: %w", err)
		}
		all = append(all, one{s, id, pend, ch})
	}
	defer func() {
		p.mu.Lock()
		for _, o := range all {
			delete(p.got, o.id)
		}
		p.mu.Unlock()
	}()
	for _, o := range all {
		for {
			_, err := o.pend.Wait(ctx)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				return st, fmt.Errorf("probe ack in %s: %w", o.session, ctx.Err())
			}
			// A final error (the client closed): post again with the same ID.
			if o.pend, err = p.sender.PostWithID(ctx, o.id, o.session, client.Text(fmt.Sprintf("probe %d", n))); err != nil {
				return st, fmt.Errorf("probe post again: %w", err)
			}
		}
	}
	st.Ack = time.Since(began)
	for _, o := range all {
		select {
		case <-o.got:
		case <-ctx.Done():
			return st, fmt.Errorf("probe delivery in %s: %w", o.session, ctx.Err())
		}
	}
	st.Deliver = time.Since(began)
	keys := make([][2]string, 0, len(all))
	for _, o := range all {
		keys = append(keys, [2]string{o.session, o.id})
	}
	err = p.stored(ctx, keys)
	st.Store = time.Since(began)
	return st, err
}

// stored waits until the store holds every (session, client_msg_id).
func (p *probe) stored(ctx context.Context, keys [][2]string) error {
	for {
		err := func() error {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			c, err := pgx.Connect(cctx, p.pgURL)
			if err != nil {
				return err
			}
			defer c.Close(context.WithoutCancel(cctx))
			for _, k := range keys {
				var n int
				if err := c.QueryRow(cctx, `SELECT count(*) FROM messages WHERE session_id = $1 AND client_msg_id = $2`, k[0], k[1]).Scan(&n); err != nil {
					return err
				}
				if n == 0 {
					return fmt.Errorf("%s/%s not stored yet", k[0], k[1])
				}
			}
			return nil
		}()
		if err == nil {
			return nil
		}
		if serr := sleep(ctx, 100*time.Millisecond); serr != nil {
			return fmt.Errorf("probe store: %w (last: %v)", serr, err)
		}
	}
}
