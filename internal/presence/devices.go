package presence

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Devices keeps the account state of users' devices: which devices a user
// has (platform, last seen) and which were signed out, and when. It is
// account state, not conversation state: nothing of it is sequenced.
//
// Layout, one pair of hashes per user (one hash slot, by the user's tag):
//
//	seqflow:devices:{user}   device_id → "platform|last_seen_ms|iat"
//	seqflow:signouts:{user}  device_id → cutoff (Unix seconds)
//
// iat is the issue time (Unix seconds) of the token that was last seen
// for the device, so a record written by a connection whose token a
// sign-out already refused is not listed. A token of the device with an
// iat at or before the cutoff is refused. Both keys expire Retention after
// their last write: a device not seen for that long drops off the list,
// and tokens living longer than Retention may outlive their device's
// sign-out (mint shorter ones).
//
// Sign-outs and the login policy's replacements are announced on the
// sharded pub/sub channel SignalsChannel (EncodeSignal), which every
// gateway subscribes to.
type Devices struct {
	rdb       redis.UniversalClient
	retention time.Duration
}

// DefaultRetention is how long device records and sign-outs are kept
// after their last write.
const DefaultRetention = 30 * 24 * time.Hour

// NewDevices returns the device state in rdb, kept retention after each
// write (DefaultRetention for 0).
func NewDevices(rdb redis.UniversalClient, retention time.Duration) *Devices {
	if retention <= 0 {
		retention = DefaultRetention
	}
	return &Devices{rdb: rdb, retention: retention}
}

func devicesKey(user string) string  { return "seqflow:devices:{" + user + "}" }
func signoutsKey(user string) string { return "seqflow:signouts:{" + user + "}" }

// SignalsChannel is the sharded pub/sub channel of device signals.
const SignalsChannel = "seqflow:devices:{signals}"

// Device is one of a user's devices as the gateways last saw it.
type Device struct {
	DeviceID string
	// Platform is the one its last connection gave, "" if none.
	Platform string
	// LastSeen is when a gateway last saw it: its connect, its disconnect,
	// every presence refresh while connected, its HTTP calls.
	LastSeen time.Time
	// IssuedAt is the iat of the token it was last seen with.
	IssuedAt time.Time
}

// Seen is a sighting of a device, for Devices.Seen.
type Seen struct {
	UserID, DeviceID, Platform string
	// IssuedAt is the iat of the device's token.
	IssuedAt time.Time
}

// Seen records that devices were seen at at, in one pipeline. A device
// seen without a platform keeps the one it has.
func (d *Devices) Seen(ctx context.Context, at time.Time, seen ...Seen) error {
	if len(seen) == 0 {
		return nil
	}
	// Without a platform, the stored one is kept: read them first (only
	// for those, and in one pipeline).
	var keep map[int]*redis.StringCmd
	for i, s := range seen {
		if s.Platform == "" {
			if keep == nil {
				keep = map[int]*redis.StringCmd{}
			}
			keep[i] = nil
		}
	}
	if keep != nil {
		_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range keep {
				keep[i] = p.HGet(ctx, devicesKey(seen[i].UserID), seen[i].DeviceID)
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("read devices: %w", err)
		}
	}
	ms := strconv.FormatInt(at.UnixMilli(), 10)
	_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range seen {
			platform := s.Platform
			if cmd := keep[i]; cmd != nil {
				if dv, ok := parseDevice(s.DeviceID, cmd.Val()); ok {
					platform = dv.Platform
				}
			}
			p.HSet(ctx, devicesKey(s.UserID), s.DeviceID, platform+"|"+ms+"|"+strconv.FormatInt(unixOrZero(s.IssuedAt), 10))
			p.PExpire(ctx, devicesKey(s.UserID), d.retention)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("record devices: %w", err)
	}
	return nil
}

func unixOrZero(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

func parseDevice(id, v string) (Device, bool) {
	platform, rest, ok1 := strings.Cut(v, "|")
	msS, iatS, ok2 := strings.Cut(rest, "|")
	ms, err1 := strconv.ParseInt(msS, 10, 64)
	iat, err2 := strconv.ParseInt(iatS, 10, 64)
	if !ok1 || !ok2 || err1 != nil || err2 != nil {
		return Device{}, false
	}
	dv := Device{DeviceID: id, Platform: platform, LastSeen: time.UnixMilli(ms)}
	if iat > 0 {
		dv.IssuedAt = time.Unix(iat, 0)
	}
	return dv, true
}

// List returns the devices of users, in one pipeline: those seen within
// Retention and not signed out since (a device seen again with a token
// issued after its sign-out is listed again). Each user's devices come
// most recently seen first; users with none are absent from the map.
func (d *Devices) List(ctx context.Context, users []string) (map[string][]Device, error) {
	out := make(map[string][]Device, len(users))
	if len(users) == 0 {
		return out, nil
	}
	devs := make([]*redis.MapStringStringCmd, len(users))
	outs := make([]*redis.MapStringStringCmd, len(users))
	_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, u := range users {
			devs[i] = p.HGetAll(ctx, devicesKey(u))
			outs[i] = p.HGetAll(ctx, signoutsKey(u))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("list devices: %w", err)
	}
	for i, u := range users {
		for id, v := range devs[i].Val() {
			dv, ok := parseDevice(id, v)
			if !ok {
				continue
			}
			if cut, err := strconv.ParseInt(outs[i].Val()[id], 10, 64); err == nil && unixOrZero(dv.IssuedAt) <= cut {
				continue // its token was signed out
			}
			out[u] = append(out[u], dv)
		}
		sort.Slice(out[u], func(a, b int) bool {
			x, y := out[u][a], out[u][b]
			if !x.LastSeen.Equal(y.LastSeen) {
				return x.LastSeen.After(y.LastSeen)
			}
			return x.DeviceID < y.DeviceID
		})
	}
	return out, nil
}

// DeviceKey names one device of one user.
type DeviceKey struct{ UserID, DeviceID string }

// SignOut refuses, from now on, every token of the device issued at or
// before cutoff (Unix seconds), and takes the device off the list. It does
// not announce it: see Announce. Signing out again moves the cutoff
// forward only.
func (d *Devices) SignOut(ctx context.Context, k DeviceKey, cutoff int64) error {
	_, err := d.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Eval(ctx, raiseScript, []string{signoutsKey(k.UserID)}, k.DeviceID, cutoff, d.retention.Milliseconds())
		p.HDel(ctx, devicesKey(k.UserID), k.DeviceID)
		return nil
	})
	if err != nil {
		return fmt.Errorf("sign out device: %w", err)
	}
	return nil
}

// raiseScript sets a hash field to ARGV[2] unless it holds a larger
// number, and the key's TTL to ARGV[3] ms.
const raiseScript = `
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
if tonumber(ARGV[2]) > cur then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 0`

// Cutoffs returns the sign-out cutoff (Unix seconds) of each device of
// keys, 0 for a device never signed out, in one pipeline: out[i] belongs
// to keys[i].
func (d *Devices) Cutoffs(ctx context.Context, keys []DeviceKey) ([]int64, error) {
	out := make([]int64, len(keys))
	if len(keys) == 0 {
		return out, nil
	}
	cmds := make([]*redis.StringCmd, len(keys))
	_, err := d.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.HGet(ctx, signoutsKey(k.UserID), k.DeviceID)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read sign-outs: %w", err)
	}
	for i, c := range cmds {
		if n, err := strconv.ParseInt(c.Val(), 10, 64); err == nil {
			out[i] = n
		}
	}
	return out, nil
}

// Announce publishes s on SignalsChannel.
func (d *Devices) Announce(ctx context.Context, s Signal) error {
	if err := d.rdb.SPublish(ctx, SignalsChannel, s.Encode()).Err(); err != nil {
		return fmt.Errorf("announce device signal: %w", err)
	}
	return nil
}

// Subscribe subscribes to SignalsChannel; the caller reads and closes it.
func (d *Devices) Subscribe(ctx context.Context) *redis.PubSub {
	return d.rdb.SSubscribe(ctx, SignalsChannel)
}

// Signal kinds.
const (
	// SignalSignOut: the device was signed out; every gateway closes its
	// connections whose token was issued at or before Cutoff, and forgets
	// what it cached of the device's sign-out.
	SignalSignOut = "signout"
	// SignalReplace: the login policy replaced connection ConnID, held by
	// gateway GatewayID, with a newer one; that gateway closes it.
	SignalReplace = "replace"
)

// Signal is a device signal between gateways.
type Signal struct {
	Kind     string
	UserID   string
	DeviceID string // signout
	Cutoff   int64  // signout: Unix seconds
	ConnID   string // replace
	// GatewayID is the gateway holding ConnID (replace).
	GatewayID string
}

// Encode renders s as "kind|user|device|cutoff|conn|gateway": IDs never
// hold '|' (auth.ValidID).
func (s Signal) Encode() string {
	return strings.Join([]string{s.Kind, s.UserID, s.DeviceID, strconv.FormatInt(s.Cutoff, 10), s.ConnID, s.GatewayID}, "|")
}

// DecodeSignal parses what Encode wrote.
func DecodeSignal(v string) (Signal, error) {
	f := strings.Split(v, "|")
	if len(f) != 6 {
		return Signal{}, fmt.Errorf("device signal %.80q: want 6 fields, got %d", v, len(f))
	}
	cut, err := strconv.ParseInt(f[3], 10, 64)
	if err != nil {
		return Signal{}, fmt.Errorf("device signal %.80q: cutoff: %w", v, err)
	}
	s := Signal{Kind: f[0], UserID: f[1], DeviceID: f[2], Cutoff: cut, ConnID: f[4], GatewayID: f[5]}
	switch {
	case s.UserID == "":
		return Signal{}, fmt.Errorf("device signal %.80q: no user", v)
	case s.Kind == SignalSignOut && s.DeviceID != "":
	case s.Kind == SignalReplace && s.ConnID != "" && s.GatewayID != "":
	default:
		return Signal{}, fmt.Errorf("device signal %.80q: incomplete %s", v, s.Kind)
	}
	return s, nil
}
