// Package keystore holds the data keys that seal message bodies before they
// enter Kafka, so that destroying a key erases every copy of what it sealed:
// in im.uplink.v1, im.sequenced.v1, dead letters, replay topics, taps,
// exports and the store (crypto-shredding; docs/erasure.md).
//
// A data key belongs to one scope: a sender, a session and a key period
// (SEQFLOW_KEY_PERIOD, default 24h, aligned to the Unix epoch). Erasing a
// user destroys every key it owns; a retention policy destroys a session's
// keys of periods that ended before its cutoff. The keys live in PostgreSQL,
// each wrapped (AES-256-GCM) by a key-encryption key from the configuration
// (SEQFLOW_KEK), behind the Wrapper interface, so a Vault transit engine or
// a cloud KMS can take the KEK's place. The store never holds a key in
// plaintext; the processes that seal or open bodies (the gateway, and any
// consumer given the KEK) keep unwrapped keys in a bounded cache for at most
// CacheTTL after PostgreSQL last confirmed the key, which bounds how long a
// destroyed key still opens a body in a running process. A key in use is
// confirmed in the background once past half its life (refresh-ahead), so
// it is not fetched again on a client's path.
//
// A key-store outage is an error (ErrUnavailable) that callers turn into
// back-pressure; nothing falls back to plaintext.
package keystore

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// KeyBytes is the size of a data key and of the KEK (AES-256).
const KeyBytes = 32

var (
	// ErrDestroyed: the key was destroyed (erasure or retention); what it
	// sealed is gone.
	ErrDestroyed = errors.New("keystore: data key destroyed")
	// ErrUnknown: no key with that ID was ever made here (a body sealed by
	// another deployment, or a corrupt key ID).
	ErrUnknown = errors.New("keystore: no such data key")
	// ErrOwnerErased: the owner was erased; no new key is made for them.
	ErrOwnerErased = errors.New("keystore: the owner was erased")
	// ErrUnavailable: the key store or the KEK did not answer; retry later.
	ErrUnavailable = errors.New("keystore: unavailable")
)

// Wrapper wraps and unwraps data keys with a key-encryption key. LocalKEK
// is the built-in one; an adapter for Vault or a cloud KMS implements the
// same two calls.
type Wrapper interface {
	// ID names the KEK, stored beside each wrapped key so a rotation can
	// tell which keys still need rewrapping.
	ID() string
	Wrap(ctx context.Context, dek []byte) ([]byte, error)
	Unwrap(ctx context.Context, wrapped []byte) ([]byte, error)
}

// LocalKEK is a KEK held in the process, from SEQFLOW_KEK.
type LocalKEK struct {
	aead cipher.AEAD
	id   string
}

// ParseKEK reads a KEK: 32 bytes in standard base64 (`openssl rand -base64
// 32`).
func ParseKEK(s string) (*LocalKEK, error) {
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
	if err != nil || len(b) != KeyBytes {
		return nil, fmt.Errorf("the KEK must be %d bytes in standard base64 (openssl rand -base64 32)", KeyBytes)
	}
	a, err := newAEAD(b)
	if err != nil {
		return nil, err
	}
	h := sha256.Sum256(append([]byte("seqflow-kek-id\x00"), b...))
	return &LocalKEK{aead: a, id: "local:" + hex.EncodeToString(h[:6])}, nil
}

// ID is "local:" and a fingerprint of the KEK (not the KEK).
func (k *LocalKEK) ID() string { return k.id }

// Wrap seals dek: nonce || ciphertext || tag.
func (k *LocalKEK) Wrap(_ context.Context, dek []byte) ([]byte, error) {
	return sealWith(k.aead, dek, []byte("seqflow-dek-v1")), nil
}

// Unwrap opens what Wrap sealed.
func (k *LocalKEK) Unwrap(_ context.Context, wrapped []byte) ([]byte, error) {
	return openWith(k.aead, wrapped, []byte("seqflow-dek-v1"))
}

// Options tune a Store.
type Options struct {
	// Period is the key period (SEQFLOW_KEY_PERIOD), default 24h.
	Period time.Duration
	// CacheTTL bounds how long an unwrapped key stays in this process
	// (SEQFLOW_KEY_CACHE_TTL), default 30s.
	CacheTTL time.Duration
	// CacheSize bounds the number of keys cached, default 100,000.
	CacheSize int
	// Now is the clock, default time.Now.
	Now func() time.Time
	// Previous are KEKs keys may still be wrapped with during a rotation
	// (SEQFLOW_KEK_PREVIOUS): they unwrap the keys whose kek_id they
	// carry; every new key is wrapped with the current one. Rewrap moves
	// the keys over.
	Previous []Wrapper
}

// Store is the PostgreSQL key store.
type Store struct {
	pool   *pgxpool.Pool
	w      Wrapper
	opts   Options
	byID   *cache[int64, cipher.AEAD]
	gone   *cache[int64, error] // destroyed or unknown: final
	bySlot *cache[slot, Key]

	// refreshing holds the cache keys (an int64 ID or a slot) being
	// confirmed in the background; refreshSlots bounds how many at once.
	refreshing   sync.Map
	refreshSlots chan struct{}
	// misses counts lookups that went to PostgreSQL on the caller's path.
	misses atomic.Int64
}

// Key is an unwrapped data key.
type Key struct {
	ID   int64
	aead cipher.AEAD
}

type slot struct {
	owner, session string
	period         int64 // Unix seconds of the period's start
}

// Open connects a key store to pool, creating its tables when missing.
func Open(ctx context.Context, pool *pgxpool.Pool, w Wrapper, o Options) (*Store, error) {
	if err := ensureTables(ctx, pool); err != nil {
		return nil, err
	}
	return newStore(pool, w, o), nil
}

func newStore(pool *pgxpool.Pool, w Wrapper, o Options) *Store {
	if o.Period < time.Second {
		o.Period = 24 * time.Hour
	}
	if o.CacheTTL <= 0 {
		o.CacheTTL = 30 * time.Second
	}
	if o.CacheSize <= 0 {
		o.CacheSize = 100_000
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Store{
		pool: pool, w: w, opts: o,
		byID:   newCache[int64, cipher.AEAD](o.CacheSize, o.CacheTTL, time.Now),
		gone:   newCache[int64, error](o.CacheSize, time.Hour, time.Now),
		bySlot: newCache[slot, Key](o.CacheSize, o.CacheTTL, time.Now),

		refreshSlots: make(chan struct{}, maxRefreshes),
	}
}

// maxRefreshes bounds the background confirmations running at once; a
// stale entry that finds no slot is served until it expires, and then
// fetched on the caller's path as any miss.
const maxRefreshes = 4

// refreshTimeout bounds one background confirmation.
const refreshTimeout = 5 * time.Second

// refreshAhead runs confirm in the background for the cache key k unless
// one already runs for it or maxRefreshes do. confirm re-reads the key's
// row and adds the entry again, or removes it when the key is gone, so a
// key in use stays cached and a destroyed one still leaves every cache
// within CacheTTL of its last confirmation.
func (s *Store) refreshAhead(k any, confirm func(ctx context.Context) error) {
	if _, busy := s.refreshing.LoadOrStore(k, struct{}{}); busy {
		return
	}
	select {
	case s.refreshSlots <- struct{}{}:
	default:
		s.refreshing.Delete(k)
		return
	}
	go func() {
		defer func() { <-s.refreshSlots; s.refreshing.Delete(k) }()
		ctx, cancel := context.WithTimeout(context.Background(), refreshTimeout)
		defer cancel()
		_ = confirm(ctx) // on error the entry expires as it would have; the next miss reports it
	}()
}

// confirmID keeps key id's unwrapped key a in the cache while its row
// exists.
func (s *Store) confirmID(id int64, a cipher.AEAD) func(context.Context) error {
	return func(ctx context.Context) error {
		var exists bool
		asOf := time.Now()
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM seqflow_data_keys WHERE key_id = $1)`, id).Scan(&exists); err != nil {
			return err
		}
		if exists {
			s.byID.AddAsOf(id, a, asOf)
		} else {
			s.byID.Remove(id)
		}
		return nil
	}
}

// confirmSlot keeps k as sl's key while it is still the slot's row.
func (s *Store) confirmSlot(sl slot, k Key) func(context.Context) error {
	return func(ctx context.Context) error {
		var id int64
		asOf := time.Now()
		err := s.pool.QueryRow(ctx, `SELECT key_id FROM seqflow_data_keys
			WHERE owner_user_id = $1 AND session_id = $2 AND period_start = to_timestamp($3)`,
			sl.owner, sl.session, sl.period).Scan(&id)
		switch {
		case err == nil && id == k.ID:
			s.bySlot.AddAsOf(sl, k, asOf)
		case err == nil || errors.Is(err, pgx.ErrNoRows):
			s.bySlot.Remove(sl)
		default:
			return err
		}
		return nil
	}
}

// ddl is the key store's own schema, outside the store's migrations: the
// keys are not a projection of the log and are never rebuilt from it.
const ddl = `
CREATE TABLE IF NOT EXISTS seqflow_data_keys (
    key_id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner_user_id text        NOT NULL,
    session_id    text        NOT NULL,
    period_start  timestamptz NOT NULL,
    -- period_end: the key seals nothing sent at or after it; retention
    -- destroys a key once period_end is older than the policy.
    period_end    timestamptz NOT NULL,
    kek_id        text        NOT NULL,
    wrapped       bytea       NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (owner_user_id, session_id, period_start)
);
CREATE INDEX IF NOT EXISTS seqflow_data_keys_session ON seqflow_data_keys (session_id, period_end);
CREATE INDEX IF NOT EXISTS seqflow_data_keys_end ON seqflow_data_keys (period_end);
CREATE TABLE IF NOT EXISTS seqflow_destroyed_keys (
    key_id        bigint      PRIMARY KEY,
    owner_user_id text        NOT NULL,
    session_id    text        NOT NULL,
    period_start  timestamptz NOT NULL,
    reason        text        NOT NULL,
    destroyed_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS seqflow_erased_users (
    user_id        text        PRIMARY KEY,
    erased_at      timestamptz NOT NULL DEFAULT now(),
    actor          text        NOT NULL,
    keys_destroyed bigint      NOT NULL
);
-- seqflow_retention: how long bodies are kept, per session, or for every
-- session without its own ('*'); no row: forever.
CREATE TABLE IF NOT EXISTS seqflow_retention (
    scope      text        PRIMARY KEY,
    keep_s     bigint      NOT NULL CHECK (keep_s > 0),
    set_at     timestamptz NOT NULL DEFAULT now()
);`

// ddlLock serializes concurrent ensureTables ("seqflow-keys" in ASCII):
// CREATE TABLE IF NOT EXISTS alone races on the catalog.
const ddlLock = 0x7365_7166_6b65_7973

func ensureTables(ctx context.Context, pool *pgxpool.Pool) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(ddlLock)); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, ddl)
		return err
	})
	if err != nil {
		return fmt.Errorf("%w: create the key tables: %v", ErrUnavailable, err)
	}
	return nil
}

// ForWrite returns the key that seals what owner sends to session now,
// making it on first use in the period. A key in use near the end of its
// period has the next period's made in the background (prepareNext).
func (s *Store) ForWrite(ctx context.Context, owner, session string) (Key, error) {
	now := s.opts.Now()
	sl := slot{owner, session, s.periodStart(now).Unix()}
	if k, ok, stale := s.bySlot.Get(sl); ok {
		if stale {
			s.refreshAhead(sl, s.confirmSlot(sl, k))
		}
		s.prepareNext(sl, now)
		return k, nil
	}
	s.misses.Add(1)
	return s.load(ctx, sl)
}

// prepareNext makes (or finds) the key of the period after sl's in the
// background once now is within nextAhead of that period, and caches it:
// without it every sender of every busy session would make a key on its
// first send of the period, all at the period's start, each on its
// sender's path.
func (s *Store) prepareNext(sl slot, now time.Time) {
	next := slot{sl.owner, sl.session, sl.period + int64(s.opts.Period/time.Second)}
	if time.Unix(next.period, 0).Sub(now) > s.nextAhead() {
		return
	}
	if _, ok, _ := s.bySlot.Get(next); ok {
		return
	}
	s.refreshAhead(next, func(ctx context.Context) error {
		_, err := s.load(ctx, next)
		return err
	})
}

// nextAhead is how long before a period the next period's keys are made:
// half a cache life, so the key is still cached when the period starts.
func (s *Store) nextAhead() time.Duration { return min(s.opts.CacheTTL, s.opts.Period) / 2 }

// load finds sl's key in PostgreSQL or makes it, and caches it.
func (s *Store) load(ctx context.Context, sl slot) (Key, error) {
	owner, session := sl.owner, sl.session
	// Most misses find the key made earlier in the period: one query. (A
	// key found here and destroyed by an erasure a moment later seals a
	// body that is then erased with the rest: the erasure's promise holds.)
	var (
		id    int64
		stord []byte
		kekID string
	)
	err := s.pool.QueryRow(ctx, `SELECT key_id, wrapped, kek_id FROM seqflow_data_keys
		WHERE owner_user_id = $1 AND session_id = $2 AND period_start = to_timestamp($3)`,
		owner, session, sl.period).Scan(&id, &stord, &kekID)
	switch {
	case err == nil:
		k, err := s.unwrap(ctx, id, kekID, stord)
		if err != nil {
			return Key{}, err
		}
		s.bySlot.Add(sl, k)
		return k, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return Key{}, unavailable(err)
	}
	dek := make([]byte, KeyBytes)
	if _, err := rand.Read(dek); err != nil {
		return Key{}, err
	}
	wrapped, err := s.w.Wrap(ctx, dek)
	if err != nil {
		return Key{}, fmt.Errorf("%w: wrap: %v", ErrUnavailable, err)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Shared with other key makers, exclusive with an erasure of the
		// same owner: no key is made for an owner once its erasure began.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared(hashtextextended($1, 0))`, owner); err != nil {
			return err
		}
		var erased bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM seqflow_erased_users WHERE user_id = $1)`, owner).Scan(&erased); err != nil {
			return err
		}
		if erased {
			return ErrOwnerErased
		}
		if _, err := tx.Exec(ctx, `INSERT INTO seqflow_data_keys (owner_user_id, session_id, period_start, period_end, kek_id, wrapped)
			VALUES ($1, $2, to_timestamp($3), to_timestamp($4), $5, $6) ON CONFLICT (owner_user_id, session_id, period_start) DO NOTHING`,
			owner, session, sl.period, sl.period+int64(s.opts.Period/time.Second), s.w.ID(), wrapped); err != nil {
			return err
		}
		// The row that won: ours, or a concurrent maker's.
		return tx.QueryRow(ctx, `SELECT key_id, wrapped, kek_id FROM seqflow_data_keys
			WHERE owner_user_id = $1 AND session_id = $2 AND period_start = to_timestamp($3)`,
			owner, session, sl.period).Scan(&id, &stord, &kekID)
	})
	if errors.Is(err, ErrOwnerErased) {
		return Key{}, err
	}
	if err != nil {
		return Key{}, unavailable(err)
	}
	k, err := s.unwrap(ctx, id, kekID, stord)
	if err != nil {
		return Key{}, err
	}
	s.bySlot.Add(sl, k)
	return k, nil
}

// Get returns key id for opening a body: ErrDestroyed once destroyed.
func (s *Store) Get(ctx context.Context, id int64) (Key, error) {
	if a, ok, stale := s.byID.Get(id); ok {
		if stale {
			s.refreshAhead(id, s.confirmID(id, a))
		}
		return Key{ID: id, aead: a}, nil
	}
	if err, ok, _ := s.gone.Get(id); ok {
		return Key{}, err
	}
	s.misses.Add(1)
	var (
		wrapped []byte
		kekID   string
	)
	err := s.pool.QueryRow(ctx, `SELECT wrapped, kek_id FROM seqflow_data_keys WHERE key_id = $1`, id).Scan(&wrapped, &kekID)
	if errors.Is(err, pgx.ErrNoRows) {
		var destroyed bool
		if err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM seqflow_destroyed_keys WHERE key_id = $1)`, id).Scan(&destroyed); err != nil {
			return Key{}, unavailable(err)
		}
		gone := ErrUnknown
		if destroyed {
			gone = ErrDestroyed
		}
		s.gone.Add(id, gone)
		return Key{}, gone
	}
	if err != nil {
		return Key{}, unavailable(err)
	}
	return s.unwrap(ctx, id, kekID, wrapped)
}

// wrapper is the KEK named kekID: the current one or a previous one.
func (s *Store) wrapper(kekID string) Wrapper {
	if s.w.ID() == kekID {
		return s.w
	}
	for _, w := range s.opts.Previous {
		if w.ID() == kekID {
			return w
		}
	}
	return nil
}

func (s *Store) unwrap(ctx context.Context, id int64, kekID string, wrapped []byte) (Key, error) {
	w := s.wrapper(kekID)
	if w == nil {
		return Key{}, fmt.Errorf("%w: key %d is wrapped with KEK %s, which this process does not hold (SEQFLOW_KEK is %s; a KEK being rotated out belongs in SEQFLOW_KEK_PREVIOUS)",
			ErrUnavailable, id, kekID, s.w.ID())
	}
	dek, err := w.Unwrap(ctx, wrapped)
	if err != nil {
		return Key{}, fmt.Errorf("%w: unwrap key %d with KEK %s: %v", ErrUnavailable, id, kekID, err)
	}
	a, err := newAEAD(dek)
	if err != nil {
		return Key{}, err
	}
	s.byID.Add(id, a)
	return Key{ID: id, aead: a}, nil
}

// Erasure is what EraseUser did.
type Erasure struct {
	UserID        string
	KeysDestroyed int64
	ErasedAt      time.Time
	// Again: the user had been erased before (the keys made since, if
	// any, are destroyed now).
	Again bool
}

// EraseUser destroys every key user owns and stops new ones from being
// made for them; actor is recorded with it. Every body user ever sealed
// can no longer be opened, in any copy, once processes' caches expire
// (CacheTTL).
func (s *Store) EraseUser(ctx context.Context, user, actor string) (Erasure, error) {
	e := Erasure{UserID: user}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1, 0))`, user); err != nil {
			return err
		}
		n, err := destroy(ctx, tx, "erase user "+user, `owner_user_id = $1`, user)
		if err != nil {
			return err
		}
		e.KeysDestroyed = n
		var inserted bool
		if err := tx.QueryRow(ctx, `INSERT INTO seqflow_erased_users AS u (user_id, actor, keys_destroyed) VALUES ($1, $2, $3)
			ON CONFLICT (user_id) DO UPDATE SET keys_destroyed = u.keys_destroyed + EXCLUDED.keys_destroyed
			RETURNING erased_at, (xmax = 0)`, user, actor, n).Scan(&e.ErasedAt, &inserted); err != nil {
			return err
		}
		e.Again = !inserted
		return nil
	})
	if err != nil {
		return Erasure{}, unavailable(err)
	}
	return e, nil
}

// ExpireBefore destroys session's keys of periods that ended at or before
// cutoff (retention); it returns how many.
func (s *Store) ExpireBefore(ctx context.Context, session string, cutoff time.Time) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var err error
		n, err = destroy(ctx, tx, "retention "+session, `session_id = $1 AND period_end <= $2`, session, cutoff)
		return err
	})
	if err != nil {
		return 0, unavailable(err)
	}
	return n, nil
}

// destroy deletes the keys matching where and records each as destroyed.
func destroy(ctx context.Context, tx pgx.Tx, reason, where string, args ...any) (int64, error) {
	args = append(args, reason)
	tag, err := tx.Exec(ctx, fmt.Sprintf(`WITH d AS (DELETE FROM seqflow_data_keys WHERE %s
			RETURNING key_id, owner_user_id, session_id, period_start)
		INSERT INTO seqflow_destroyed_keys (key_id, owner_user_id, session_id, period_start, reason)
		SELECT key_id, owner_user_id, session_id, period_start, $%d FROM d
		ON CONFLICT (key_id) DO NOTHING`, where, len(args)), args...)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// periodStart is the start of t's key period, periods counted from the
// Unix epoch.
func (s *Store) periodStart(t time.Time) time.Time {
	p := int64(s.opts.Period / time.Second)
	u := t.Unix()
	return time.Unix(u-((u%p)+p)%p, 0).UTC()
}

func unavailable(err error) error {
	if errors.Is(err, ErrUnavailable) || errors.Is(err, ErrOwnerErased) {
		return err
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

func sealWith(a cipher.AEAD, plaintext, ad []byte) []byte {
	out := make([]byte, a.NonceSize(), a.NonceSize()+len(plaintext)+a.Overhead())
	if _, err := rand.Read(out); err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return a.Seal(out, out, plaintext, ad)
}

func openWith(a cipher.AEAD, sealed, ad []byte) ([]byte, error) {
	if len(sealed) < a.NonceSize()+a.Overhead() {
		return nil, errors.New("sealed data too short")
	}
	return a.Open(nil, sealed[:a.NonceSize()], sealed[a.NonceSize():], ad)
}
