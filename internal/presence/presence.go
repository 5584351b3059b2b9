// Package presence records which devices are online on which gateway, in
// Redis, for the pusher to route events.
//
// Layout: one hash per user, key "seqflow:presence:{user_id}", one field per
// connection ("conn_id"), value "gateway_id|device_id|expires_unix_ms". The
// gateway refreshes its connections' fields (and the key's TTL) every TTL/3
// while they are open and deletes the field on close; readers ignore fields
// past their expiry, so a crashed gateway's connections vanish within TTL
// even though Redis hash fields do not expire one by one. Data lost in Redis
// (a restart without persistence) heals within one refresh period.
//
// Every Put and Remove then announces the users it changed on the sharded
// pub/sub channel ChangesChannel (user IDs separated by "\n"), after the
// writes have returned, so a reader that hears of a change and reads again
// sees the change. A Cache keeps lookups in memory and drops a user's
// entry when it hears of the user.
package presence

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Conn is one online connection.
type Conn struct {
	UserID    string
	DeviceID  string
	ConnID    string
	GatewayID string
}

// Store reads and writes presence. Safe for concurrent use.
type Store struct {
	rdb redis.UniversalClient
	ttl time.Duration
	now func() time.Time
}

// New returns a store whose entries live ttl unless refreshed.
func New(rdb redis.UniversalClient, ttl time.Duration) *Store {
	return &Store{rdb: rdb, ttl: ttl, now: time.Now}
}

// TTL returns the entry lifetime; refresh at least every TTL/3.
func (s *Store) TTL() time.Duration { return s.ttl }

func key(user string) string { return "seqflow:presence:{" + user + "}" }

// ChangesChannel is the sharded pub/sub channel on which Put and Remove
// announce the users whose connections changed.
const ChangesChannel = "seqflow:presence:{changes}"

// announceChunk bounds the users of one announcement (a gateway's refresh
// of all its connections is one Put).
const announceChunk = 1000

// announce publishes the users of conns, once each, in messages of at most
// announceChunk users.
func (s *Store) announce(ctx context.Context, conns []Conn) error {
	seen := make(map[string]struct{}, len(conns))
	var b strings.Builder
	n := 0
	flush := func() error {
		if n == 0 {
			return nil
		}
		err := s.rdb.SPublish(ctx, ChangesChannel, b.String()).Err()
		b.Reset()
		n = 0
		return err
	}
	for _, c := range conns {
		if _, ok := seen[c.UserID]; ok {
			continue
		}
		seen[c.UserID] = struct{}{}
		if n > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(c.UserID)
		if n++; n == announceChunk {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// Put registers or refreshes conns, in one pipeline.
func (s *Store) Put(ctx context.Context, conns ...Conn) error {
	if len(conns) == 0 {
		return nil
	}
	exp := strconv.FormatInt(s.now().Add(s.ttl).UnixMilli(), 10)
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range conns {
			p.HSet(ctx, key(c.UserID), c.ConnID, c.GatewayID+"|"+c.DeviceID+"|"+exp)
			p.PExpire(ctx, key(c.UserID), s.ttl)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("put presence: %w", err)
	}
	if err := s.announce(ctx, conns); err != nil {
		return fmt.Errorf("announce presence: %w", err)
	}
	return nil
}

// Remove deletes conns.
func (s *Store) Remove(ctx context.Context, conns ...Conn) error {
	if len(conns) == 0 {
		return nil
	}
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range conns {
			p.HDel(ctx, key(c.UserID), c.ConnID)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("remove presence: %w", err)
	}
	if err := s.announce(ctx, conns); err != nil {
		return fmt.Errorf("announce presence: %w", err)
	}
	return nil
}

// Lookup returns the live connections of users, in one pipeline. Users with
// none are absent from the map.
func (s *Store) Lookup(ctx context.Context, users []string) (map[string][]Conn, error) {
	got, err := s.read(ctx, users)
	if err != nil {
		return nil, err
	}
	return live(got, users, s.now().UnixMilli(), nil), nil
}

// expiring is a connection with its expiry, Unix ms.
type expiring struct {
	Conn
	exp int64
}

// read returns every well-formed field of users' hashes, expired or not,
// in one pipeline: got[i] belongs to users[i].
func (s *Store) read(ctx context.Context, users []string) ([][]expiring, error) {
	got := make([][]expiring, len(users))
	if len(users) == 0 {
		return got, nil
	}
	cmds := make([]*redis.MapStringStringCmd, len(users))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, u := range users {
			cmds[i] = p.HGetAll(ctx, key(u))
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, fmt.Errorf("look up presence: %w", err)
	}
	for i, u := range users {
		for connID, v := range cmds[i].Val() {
			gw, rest, ok1 := strings.Cut(v, "|")
			dev, expS, ok2 := strings.Cut(rest, "|")
			exp, err := strconv.ParseInt(expS, 10, 64)
			if !ok1 || !ok2 || err != nil {
				continue
			}
			got[i] = append(got[i], expiring{Conn: Conn{UserID: u, DeviceID: dev, ConnID: connID, GatewayID: gw}, exp: exp})
		}
	}
	return got, nil
}

// live adds to out (made when nil) the connections of got not expired at
// nowMs, by user; users with none are left out.
func live(got [][]expiring, users []string, nowMs int64, out map[string][]Conn) map[string][]Conn {
	if out == nil {
		out = make(map[string][]Conn)
	}
	for i, cs := range got {
		for _, c := range cs {
			if c.exp >= nowMs {
				out[users[i]] = append(out[users[i]], c.Conn)
			}
		}
	}
	return out
}
