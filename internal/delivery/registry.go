package delivery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// Registry maps a gateway ID to the address its stream receiver listens
// on, for transports that connect to gateways directly.
type Registry interface {
	// Register records addr for gatewayID for ttl; refresh before it ends.
	Register(ctx context.Context, gatewayID, addr string, ttl time.Duration) error
	// Deregister removes gatewayID's entry if it still names addr.
	Deregister(ctx context.Context, gatewayID, addr string) error
	// Lookup returns gatewayID's address, or ErrNoReceiver.
	Lookup(ctx context.Context, gatewayID string) (string, error)
}

// RedisRegistry keeps the registry in Redis: key
// "seqflow:gateway:{gateway_id}:push" = "host:port", with a TTL.
type RedisRegistry struct{ rdb redis.UniversalClient }

var _ Registry = (*RedisRegistry)(nil)

// NewRedisRegistry returns a registry over rdb.
func NewRedisRegistry(rdb redis.UniversalClient) *RedisRegistry { return &RedisRegistry{rdb: rdb} }

func registryKey(gatewayID string) string { return "seqflow:gateway:{" + gatewayID + "}:push" }

// Register implements Registry.
func (r *RedisRegistry) Register(ctx context.Context, gatewayID, addr string, ttl time.Duration) error {
	if err := r.rdb.Set(ctx, registryKey(gatewayID), addr, ttl).Err(); err != nil {
		return fmt.Errorf("register gateway %s: %w", gatewayID, err)
	}
	return nil
}

// deregisterScript deletes the key only if it still holds our address, so
// a restarted gateway's fresh entry is not removed by its predecessor.
var deregisterScript = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)

// Deregister implements Registry.
func (r *RedisRegistry) Deregister(ctx context.Context, gatewayID, addr string) error {
	if err := deregisterScript.Run(ctx, r.rdb, []string{registryKey(gatewayID)}, addr).Err(); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("deregister gateway %s: %w", gatewayID, err)
	}
	return nil
}

// Lookup implements Registry.
func (r *RedisRegistry) Lookup(ctx context.Context, gatewayID string) (string, error) {
	addr, err := r.rdb.Get(ctx, registryKey(gatewayID)).Result()
	if errors.Is(err, redis.Nil) {
		return "", ErrNoReceiver
	}
	if err != nil {
		return "", fmt.Errorf("look up gateway %s: %w", gatewayID, err)
	}
	return addr, nil
}
