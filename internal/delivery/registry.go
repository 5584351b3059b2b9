package delivery

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/seqflow/seqflow/internal/peerauth"
)

// Registry maps a gateway ID to the address its stream receiver listens
// on, for transports that connect to gateways directly.
type Registry interface {
	// Register records addr for gatewayID for ttl; refresh before it ends.
	Register(ctx context.Context, gatewayID, addr string, ttl time.Duration) error
	// Deregister removes gatewayID's entry if it still names addr.
	Deregister(ctx context.Context, gatewayID, addr string) error
	// Lookup returns gatewayID's address, or ErrNoReceiver when there is
	// none; an entry not signed by a key of the ring is none as well, its
	// error wrapping ErrPeerAuth too.
	Lookup(ctx context.Context, gatewayID string) (string, error)
}

// RedisRegistry keeps the registry in Redis: key
// "seqflow:gateway:{gateway_id}:push" with a TTL, whose value is signed:
// "v1;host:port;expires_ms;key_id;base64(HMAC(key, gateway_id, addr,
// expires_ms))". Lookup refuses an entry that does not verify or has
// expired, so whoever can write to Redis cannot redirect pushes: not to a
// listener of their own (which the handshake would refuse as well), nor to
// another gateway.
type RedisRegistry struct {
	rdb  redis.UniversalClient
	keys *peerauth.Keyring
}

var _ Registry = (*RedisRegistry)(nil)

// NewRedisRegistry returns a registry over rdb whose entries keys signs
// and verifies.
func NewRedisRegistry(rdb redis.UniversalClient, keys *peerauth.Keyring) *RedisRegistry {
	return &RedisRegistry{rdb: rdb, keys: keys}
}

func registryKey(gatewayID string) string { return "seqflow:gateway:{" + gatewayID + "}:push" }

// registryEntryPrefix is what every entry for addr starts with.
func registryEntryPrefix(addr string) string { return "v1;" + addr + ";" }

func registryMAC(key []byte, gatewayID, addr, exp string) []byte {
	return peerauth.MAC(key, []byte("seqflow registry v1"), []byte(gatewayID), []byte(addr), []byte(exp))
}

// signEntry is the registry value of gatewayID at addr until exp.
func (r *RedisRegistry) signEntry(gatewayID, addr string, exp time.Time) string {
	kid := r.keys.SigningID()
	key, _ := r.keys.Key(kid)
	e := strconv.FormatInt(exp.UnixMilli(), 10)
	return registryEntryPrefix(addr) + e + ";" + kid + ";" + base64.RawStdEncoding.EncodeToString(registryMAC(key, gatewayID, addr, e))
}

// verifyEntry returns the address of a registry value for gatewayID.
//
// An entry that does not verify is ErrNoReceiver as well as ErrPeerAuth:
// a ChainSender then reaches the gateway over pub/sub, authenticated too,
// so forging an entry cannot stop pushes either.
func (r *RedisRegistry) verifyEntry(gatewayID, v string, now time.Time) (string, error) {
	f := strings.Split(v, ";")
	if len(f) != 5 || f[0] != "v1" {
		return "", fmt.Errorf("%w: %w: registry entry of gateway %s is not a signed entry", ErrNoReceiver, ErrPeerAuth, gatewayID)
	}
	addr, e, kid, m := f[1], f[2], f[3], f[4]
	key, ok := r.keys.Key(kid)
	if !ok {
		return "", fmt.Errorf("%w: %w: registry entry of gateway %s is signed by key %q, not in the ring", ErrNoReceiver, ErrPeerAuth, gatewayID, kid)
	}
	mac, err := base64.RawStdEncoding.DecodeString(m)
	if err != nil || !peerauth.Equal(mac, registryMAC(key, gatewayID, addr, e)) {
		return "", fmt.Errorf("%w: %w: registry entry of gateway %s has a bad signature", ErrNoReceiver, ErrPeerAuth, gatewayID)
	}
	exp, err := strconv.ParseInt(e, 10, 64)
	if err != nil || now.UnixMilli() > exp {
		// Redis expires it too; this bounds an old signed entry written back.
		return "", fmt.Errorf("%w: registry entry of gateway %s expired", ErrNoReceiver, gatewayID)
	}
	return addr, nil
}

// Register implements Registry.
func (r *RedisRegistry) Register(ctx context.Context, gatewayID, addr string, ttl time.Duration) error {
	if strings.Contains(addr, ";") {
		return fmt.Errorf("register gateway %s: address %q contains ';'", gatewayID, addr)
	}
	if err := r.rdb.Set(ctx, registryKey(gatewayID), r.signEntry(gatewayID, addr, time.Now().Add(ttl)), ttl).Err(); err != nil {
		return fmt.Errorf("register gateway %s: %w", gatewayID, err)
	}
	return nil
}

// deregisterScript deletes the key only if it still holds our address, so
// a restarted gateway's fresh entry is not removed by its predecessor.
var deregisterScript = redis.NewScript(`local v = redis.call("GET", KEYS[1])
if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// Deregister implements Registry.
func (r *RedisRegistry) Deregister(ctx context.Context, gatewayID, addr string) error {
	if err := deregisterScript.Run(ctx, r.rdb, []string{registryKey(gatewayID)}, registryEntryPrefix(addr)).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("deregister gateway %s: %w", gatewayID, err)
	}
	return nil
}

// Lookup implements Registry.
func (r *RedisRegistry) Lookup(ctx context.Context, gatewayID string) (string, error) {
	v, err := r.rdb.Get(ctx, registryKey(gatewayID)).Result()
	if errors.Is(err, redis.Nil) {
		return "", ErrNoReceiver
	}
	if err != nil {
		return "", fmt.Errorf("look up gateway %s: %w", gatewayID, err)
	}
	return r.verifyEntry(gatewayID, v, time.Now())
}
