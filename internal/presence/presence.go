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
	return nil
}

// Lookup returns the live connections of users, in one pipeline. Users with
// none are absent from the map.
func (s *Store) Lookup(ctx context.Context, users []string) (map[string][]Conn, error) {
	out := make(map[string][]Conn)
	if len(users) == 0 {
		return out, nil
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
	nowMs := s.now().UnixMilli()
	for i, u := range users {
		for connID, v := range cmds[i].Val() {
			gw, rest, ok1 := strings.Cut(v, "|")
			dev, expS, ok2 := strings.Cut(rest, "|")
			exp, err := strconv.ParseInt(expS, 10, 64)
			if !ok1 || !ok2 || err != nil || exp < nowMs {
				continue
			}
			out[u] = append(out[u], Conn{UserID: u, DeviceID: dev, ConnID: connID, GatewayID: gw})
		}
	}
	return out, nil
}
