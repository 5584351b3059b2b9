package main

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqflow/seqflow/internal/apierr"
	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// Devices are account state, kept in Redis (presence.Devices), never in
// the sequenced log: a user's device list, each device's sign-out cutoff,
// and the signals that close connections on every gateway (a sign-out,
// the login policy's replacement of an older connection). The signals go
// over one Redis pub/sub channel every gateway subscribes to rather than
// over the push transports: the push frames' schema has no place for
// them, they are rare (human actions, and connects that find an older
// connection), and pub/sub reaches gateways that hold no connection of the
// device but may have cached its cutoff.
const (
	// cutoffCacheTTL bounds how long a device's sign-out cutoff read from
	// Redis is reused. Entries are dropped when a sign-out of the device
	// is heard, and kept only while the signal subscription is up, so the
	// TTL matters only for a sign-out whose announcement was lost.
	cutoffCacheTTL = 5 * time.Second
	// cutoffCacheMax bounds the cached cutoffs; when full the cache starts
	// over empty.
	cutoffCacheMax = 100_000
	// signOutCheckTimeout bounds the Redis read of a check; past it the
	// token is let through (counted), as rate limits fall back rather than
	// refuse all traffic while Redis does not answer.
	signOutCheckTimeout = 100 * time.Millisecond
	// httpSeenEvery: an HTTP-only device's last seen is written at most
	// this often per gateway.
	httpSeenEvery = time.Minute
)

// visibility says which users a user may see the presence of (those it
// shares a session with). It blocks on PostgreSQL; ctx bounds it.
type visibility interface {
	sharesSession(ctx context.Context, user string, others []string) (map[string]bool, error)
}

// devices answers devices, sign_out and presence, checks tokens against
// sign-outs, records when devices are seen, applies the login policy, and
// closes this gateway's connections when a device signal says so (Run).
type devices struct {
	gatewayID string
	policy    string
	store     *presence.Devices
	conns     *presence.Store // uncached: the policy must see a connection registered a moment ago
	pw        presenceWriter
	visible   visibility
	hub       *hub
	log       *slog.Logger
	m         *metrics
	now       func() time.Time

	mu      sync.Mutex
	live    bool   // subscribed: cutoffs may be cached
	gen     uint64 // bumped on every sign-out heard and every restart of the cache
	cutoffs map[presence.DeviceKey]cachedCutoff
	seen    map[presence.DeviceKey]time.Time // HTTP sightings written, for httpSeenEvery
}

type cachedCutoff struct {
	cutoff int64
	until  time.Time
}

func newDevices(cfg Config, store *presence.Devices, conns *presence.Store, pw presenceWriter, visible visibility,
	hub *hub, log *slog.Logger, m *metrics, now func() time.Time) *devices {
	return &devices{gatewayID: cfg.GatewayID, policy: cfg.LoginPolicy, store: store, conns: conns, pw: pw, visible: visible,
		hub: hub, log: log, m: m, now: now,
		cutoffs: map[presence.DeviceKey]cachedCutoff{}, seen: map[presence.DeviceKey]time.Time{}}
}

// signedOut refuses p's token when it was issued at or before its
// device's sign-out (errSignedOut), and when the sign-out cannot be read
// (errSignOutUnknown, retryable: counted as redis_error): a token is let
// through only once it is known not to be signed out, so a Redis outage
// never revives a signed-out device (an erased user's among them).
func (d *devices) signedOut(ctx context.Context, p auth.Principal) *apierr.Error {
	k := presence.DeviceKey{UserID: p.UserID, DeviceID: p.DeviceID}
	cut, err := d.cutoff(ctx, k)
	if err != nil {
		d.m.signOutChecks.WithLabelValues("redis_error").Inc()
		d.log.Warn("sign-out check: refused, Redis did not answer", "user_id", p.UserID, "device_id", p.DeviceID, "err", err)
		return errSignOutUnknown
	}
	if cut > 0 && issuedUnix(p) <= cut {
		d.m.signOutChecks.WithLabelValues("refused").Inc()
		return errSignedOut
	}
	return nil
}

// errSignedOut is the answer to a signed-out token.
var errSignedOut = apierr.New(imv1.ErrorCode_ERROR_CODE_SIGNED_OUT, "")

// errSignOutUnknown answers a token whose device's sign-out could not be
// read: retry.
var errSignOutUnknown = apierr.New(imv1.ErrorCode_ERROR_CODE_UNAVAILABLE, "the sign-out list did not answer; retry")

func issuedUnix(p auth.Principal) int64 {
	if p.IssuedAt.IsZero() {
		return 0
	}
	return p.IssuedAt.Unix()
}

// cutoff returns k's sign-out cutoff, from the cache or Redis.
func (d *devices) cutoff(ctx context.Context, k presence.DeviceKey) (int64, error) {
	now := d.now()
	d.mu.Lock()
	if e, ok := d.cutoffs[k]; ok && d.live && now.Before(e.until) {
		d.mu.Unlock()
		return e.cutoff, nil
	}
	gen := d.gen
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, signOutCheckTimeout)
	defer cancel()
	cuts, err := d.store.Cutoffs(ctx, []presence.DeviceKey{k})
	if err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	// A sign-out heard while the read was under way may postdate it: only
	// a read that no sign-out overtook is kept.
	if d.live && d.gen == gen {
		if len(d.cutoffs) >= cutoffCacheMax {
			clear(d.cutoffs)
		}
		d.cutoffs[k] = cachedCutoff{cutoff: cuts[0], until: now.Add(cutoffCacheTTL)}
	}
	return cuts[0], nil
}

// connected records c's device and applies the login policy to the
// user's other connections; c itself may be closed by it (a newer one
// exists). It blocks on Redis.
func (d *devices) connected(ctx context.Context, c *conn) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := d.store.Seen(ctx, d.now(), c.seen()); err != nil {
		d.m.presenceErrs.Inc()
		d.log.Warn("record device", "user_id", c.p.UserID, "err", err)
	}
	if d.policy == policyMulti || d.policy == policyPlatform && c.platform == "" {
		return
	}
	all, err := d.conns.Lookup(ctx, []string{c.p.UserID})
	if err != nil {
		d.m.presenceErrs.Inc()
		d.log.Warn("login policy: presence lookup", "user_id", c.p.UserID, "err", err)
		return
	}
	platforms := map[string]string{c.p.DeviceID: c.platform}
	if d.policy == policyPlatform {
		list, err := d.store.List(ctx, []string{c.p.UserID})
		if err != nil {
			d.m.presenceErrs.Inc()
			d.log.Warn("login policy: device list", "user_id", c.p.UserID, "err", err)
			return
		}
		for _, dv := range list[c.p.UserID] {
			if dv.DeviceID != c.p.DeviceID {
				platforms[dv.DeviceID] = dv.Platform
			}
		}
	}
	for _, o := range all[c.p.UserID] {
		if o.ConnID == c.id || !strings.HasPrefix(o.ConnID, "c-") {
			continue // itself, or an HTTP call waiting for its seq
		}
		same := o.DeviceID == c.p.DeviceID
		if d.policy == policyPlatform {
			same = platforms[o.DeviceID] == c.platform
		}
		if !same {
			continue
		}
		// Connection IDs are UUIDv7s: a later one sorts after. Two
		// connections that find each other both keep the later one.
		if o.ConnID > c.id {
			c.closeWith(closeReplaced, "replaced", "replaced")
			return
		}
		d.replace(ctx, o)
	}
}

// replace closes the older connection o: here, or by a signal to its
// gateway. Its presence entry goes at once, so nothing more is routed to
// it (its gateway may be gone, leaving the entry until it expires).
func (d *devices) replace(ctx context.Context, o presence.Conn) {
	if o.GatewayID == d.gatewayID {
		d.closeReplaced(o.UserID, o.ConnID)
	} else {
		d.announce(ctx, presence.Signal{Kind: presence.SignalReplace, UserID: o.UserID, ConnID: o.ConnID, GatewayID: o.GatewayID})
	}
	if err := d.pw.Remove(ctx, o); err != nil {
		d.m.presenceErrs.Inc()
	}
}

func (d *devices) closeReplaced(user, connID string) {
	if c := d.hub.conn(connID); c != nil && c.p.UserID == user {
		c.closeWith(closeReplaced, "replaced", "replaced")
		d.m.deviceSignals.WithLabelValues(presence.SignalReplace, "closed").Inc()
	}
}

func (d *devices) announce(ctx context.Context, s presence.Signal) {
	if err := d.store.Announce(ctx, s); err != nil {
		d.m.deviceSignals.WithLabelValues(s.Kind, "announce_error").Inc()
		d.log.Warn("announce device signal", "signal", s.Kind, "user_id", s.UserID, "err", err)
		return
	}
	d.m.deviceSignals.WithLabelValues(s.Kind, "announced").Inc()
}

// disconnected records when c's device was last seen.
func (d *devices) disconnected(c *conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := d.store.Seen(ctx, d.now(), c.seen()); err != nil {
		d.m.presenceErrs.Inc()
	}
}

// refresh records that the devices of cs are still seen (the hub's
// presence refresh, every TTL/3).
func (d *devices) refresh(ctx context.Context, cs []*conn) {
	seen := make([]presence.Seen, 0, len(cs))
	for _, c := range cs {
		seen = append(seen, c.seen())
	}
	if err := d.store.Seen(ctx, d.now(), seen...); err != nil {
		d.m.presenceErrs.Inc()
		d.log.Warn("refresh devices", "connections", len(cs), "err", err)
	}
}

// httpSeen records an HTTP call of p's device, at most once per
// httpSeenEvery per gateway.
func (d *devices) httpSeen(ctx context.Context, p auth.Principal) {
	k := presence.DeviceKey{UserID: p.UserID, DeviceID: p.DeviceID}
	now := d.now()
	d.mu.Lock()
	if now.Sub(d.seen[k]) < httpSeenEvery {
		d.mu.Unlock()
		return
	}
	if len(d.seen) >= cutoffCacheMax {
		clear(d.seen)
	}
	d.seen[k] = now
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := d.store.Seen(ctx, now, presence.Seen{UserID: p.UserID, DeviceID: p.DeviceID, Platform: p.Platform, IssuedAt: p.IssuedAt}); err != nil {
		d.m.presenceErrs.Inc()
	}
}

// list answers devices: p's user's devices with their connections.
func (d *devices) list(ctx context.Context, p auth.Principal, f *wire.ClientFrame) (any, *apierr.Error) {
	recs, err := d.store.List(ctx, []string{p.UserID})
	if err != nil {
		return nil, redisError(err)
	}
	conns, err := d.conns.Lookup(ctx, []string{p.UserID})
	if err != nil {
		return nil, redisError(err)
	}
	nowMs := d.now().UnixMilli()
	byID := map[string]*wire.DeviceInfo{}
	out := make([]wire.DeviceInfo, 0, len(recs[p.UserID])+1)
	for _, dv := range recs[p.UserID] {
		out = append(out, wire.DeviceInfo{DeviceID: dv.DeviceID, Platform: dv.Platform, LastSeenMs: dv.LastSeen.UnixMilli()})
	}
	for i := range out {
		byID[out[i].DeviceID] = &out[i]
	}
	for _, c := range conns[p.UserID] {
		if !strings.HasPrefix(c.ConnID, "c-") {
			continue
		}
		di := byID[c.DeviceID]
		if di == nil {
			// Online, but its record was lost (Redis without persistence)
			// or it was signed out a moment ago: the signal closes it.
			continue
		}
		di.Online = true
		di.Connections++
		di.LastSeenMs = nowMs
	}
	if _, ok := byID[p.DeviceID]; !ok {
		// The asking device over HTTP only, not recorded yet.
		out = append(out, wire.DeviceInfo{DeviceID: p.DeviceID, Platform: p.Platform, LastSeenMs: nowMs})
	}
	for i := range out {
		out[i].Current = out[i].DeviceID == p.DeviceID
	}
	slices.SortStableFunc(out, func(a, b wire.DeviceInfo) int {
		switch {
		case a.Online != b.Online:
			if a.Online {
				return -1
			}
			return 1
		case a.LastSeenMs != b.LastSeenMs:
			if a.LastSeenMs > b.LastSeenMs {
				return -1
			}
			return 1
		}
		return strings.Compare(a.DeviceID, b.DeviceID)
	})
	return wire.DevicesResult{Op: wire.OpResult, ReqID: f.ReqID, Devices: out}, nil
}

// signOut refuses p's user's device f.DeviceID's tokens issued up to now
// and returns the answer and the signal that closes its connections,
// which the caller hands to apply once the answer is queued (a device
// signing itself out gets its answer before the close).
func (d *devices) signOut(ctx context.Context, p auth.Principal, f *wire.ClientFrame) (wire.SignOutResult, presence.Signal, *apierr.Error) {
	cutoff := d.now().Unix()
	k := presence.DeviceKey{UserID: p.UserID, DeviceID: f.DeviceID}
	if err := d.store.SignOut(ctx, k, cutoff); err != nil {
		return wire.SignOutResult{}, presence.Signal{}, redisError(err)
	}
	d.log.Info("device signed out", "user_id", p.UserID, "device_id", f.DeviceID, "by_device_id", p.DeviceID)
	return wire.SignOutResult{Op: wire.OpResult, ReqID: f.ReqID, DeviceID: f.DeviceID, SignedOutAt: cutoff},
		presence.Signal{Kind: presence.SignalSignOut, UserID: p.UserID, DeviceID: f.DeviceID, Cutoff: cutoff}, nil
}

// announceSignOut applies s here at once and announces it to every
// gateway.
func (d *devices) announceSignOut(s presence.Signal) {
	d.apply(s)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	d.announce(ctx, s)
}

// presence answers presence for the users of f that p may see.
func (d *devices) presence(ctx context.Context, p auth.Principal, f *wire.ClientFrame) (any, *apierr.Error) {
	users := make([]string, 0, len(f.UserIDs))
	seen := map[string]bool{}
	for _, u := range f.UserIDs {
		if !seen[u] {
			seen[u] = true
			users = append(users, u)
		}
	}
	others := make([]string, 0, len(users))
	for _, u := range users {
		if u != p.UserID {
			others = append(others, u)
		}
	}
	ok := map[string]bool{p.UserID: true}
	if len(others) > 0 {
		shared, err := d.visible.sharesSession(ctx, p.UserID, others)
		if err != nil {
			return nil, storeError(err)
		}
		for u := range shared {
			ok[u] = true
		}
	}
	res := wire.PresenceResult{Op: wire.OpResult, ReqID: f.ReqID, Presence: []wire.UserPresence{}}
	var visible []string
	for _, u := range users {
		if ok[u] {
			visible = append(visible, u)
		} else {
			res.NotVisible = append(res.NotVisible, u)
		}
	}
	if len(visible) == 0 {
		return res, nil
	}
	recs, err := d.store.List(ctx, visible)
	if err != nil {
		return nil, redisError(err)
	}
	conns, err := d.conns.Lookup(ctx, visible)
	if err != nil {
		return nil, redisError(err)
	}
	nowMs := d.now().UnixMilli()
	for _, u := range visible {
		up := wire.UserPresence{UserID: u}
		platform := map[string]string{}
		for _, dv := range recs[u] {
			platform[dv.DeviceID] = dv.Platform
			up.LastSeenMs = max(up.LastSeenMs, dv.LastSeen.UnixMilli())
		}
		for _, c := range conns[u] {
			if !strings.HasPrefix(c.ConnID, "c-") {
				continue
			}
			up.Online, up.LastSeenMs = true, nowMs
			if pl := platform[c.DeviceID]; pl != "" && !slices.Contains(up.Platforms, pl) {
				up.Platforms = append(up.Platforms, pl)
			}
		}
		slices.Sort(up.Platforms)
		res.Presence = append(res.Presence, up)
	}
	return res, nil
}

func redisError(err error) *apierr.Error {
	if errors.Is(err, context.DeadlineExceeded) {
		return apierr.New(imv1.ErrorCode_ERROR_CODE_TIMEOUT, "Redis did not answer in time")
	}
	return apierr.New(imv1.ErrorCode_ERROR_CODE_UNAVAILABLE, "Redis is unavailable")
}

// apply carries out a device signal on this gateway's connections.
func (d *devices) apply(s presence.Signal) {
	switch s.Kind {
	case presence.SignalSignOut:
		k := presence.DeviceKey{UserID: s.UserID, DeviceID: s.DeviceID}
		d.mu.Lock()
		d.gen++
		delete(d.cutoffs, k)
		d.mu.Unlock()
		for _, c := range d.hub.all() {
			if c.p.UserID == s.UserID && c.p.DeviceID == s.DeviceID && issuedUnix(c.p) <= s.Cutoff {
				c.closeWith(closeSignedOut, "signed_out", "signed_out")
				d.m.deviceSignals.WithLabelValues(s.Kind, "closed").Inc()
			}
		}
	case presence.SignalReplace:
		if s.GatewayID == d.gatewayID {
			d.closeReplaced(s.UserID, s.ConnID)
		}
	}
}

// setLive starts the cutoff cache over and says whether it may keep
// entries.
func (d *devices) setLive(v bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.live = v
	d.gen++
	clear(d.cutoffs)
}

// recheck closes this gateway's connections whose device was signed out:
// after a (re)subscription, for sign-outs announced while the
// subscription was down.
func (d *devices) recheck(ctx context.Context) {
	cs := d.hub.all()
	if len(cs) == 0 {
		return
	}
	keys := make([]presence.DeviceKey, len(cs))
	for i, c := range cs {
		keys[i] = presence.DeviceKey{UserID: c.p.UserID, DeviceID: c.p.DeviceID}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cuts, err := d.store.Cutoffs(ctx, keys)
	if err != nil {
		d.log.Warn("recheck sign-outs", "connections", len(cs), "err", err)
		return
	}
	for i, c := range cs {
		if cuts[i] > 0 && issuedUnix(c.p) <= cuts[i] {
			c.closeWith(closeSignedOut, "signed_out", "signed_out")
			d.m.deviceSignals.WithLabelValues(presence.SignalSignOut, "closed").Inc()
		}
	}
}

// Run listens to the device signals until ctx ends and returns ctx.Err().
// Each (re)subscription rechecks the open connections, so a sign-out
// announced while the subscription was down still closes them.
func (d *devices) Run(ctx context.Context) error {
	ps := d.store.Subscribe(ctx)
	defer ps.Close()
	// A blocked receive does not watch ctx; closing the subscription ends it.
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer stop()
	defer d.setLive(false)
	backoff := 50 * time.Millisecond
	for {
		msg, err := ps.ReceiveTimeout(ctx, 15*time.Second)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				_ = ps.Ping(ctx) // quiet, not broken: a ping proves the connection
				continue
			}
			d.setLive(false)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			d.setLive(true)
			backoff = 50 * time.Millisecond
			d.recheck(ctx)
		case *redis.Message:
			s, err := presence.DecodeSignal(m.Payload)
			if err != nil {
				d.m.deviceSignals.WithLabelValues("unknown", "bad").Inc()
				d.log.Warn("device signal", "err", err)
				continue
			}
			d.m.deviceSignals.WithLabelValues(s.Kind, "heard").Inc()
			d.apply(s)
		}
	}
}
