// Package peerauth authenticates the peer services to each other on the
// push path (pusher, sequencer and gateway to gateway, and the gateway
// registry in Redis) with HMAC-SHA256 under a shared key ring.
//
// HMAC was chosen over mTLS because one secret, mounted into every peer
// service, is all a deployment needs (no cluster CA, no certificates to
// issue, renew and map to gateway IDs), and because every claim is
// testable in process: a sender that lacks the ring's key, a frame with a
// wrong MAC, a replay to another gateway or a later one. HMAC gives
// integrity and origin, not secrecy: whoever can watch the network between
// peers reads the push path's metadata (bodies stay sealed when a KEK is
// set), which is why the push port also sits behind a NetworkPolicy.
//
// A ring holds one or more keys; the first signs and all verify, so a key
// rotates without downtime: add the new key second everywhere, then move
// it first everywhere, then drop the old one, a rolling restart each.
package peerauth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
)

// The settings every peer service reads (Load).
const (
	// EnvKeys is the key ring inline: "id:base64key" entries separated by
	// commas or newlines, the first signing.
	EnvKeys = "SEQFLOW_PEER_KEYS"
	// EnvKeysFile names a file holding the key ring in the same format, one
	// entry a line ("#" starts a comment); it wins over EnvKeys.
	EnvKeysFile = "SEQFLOW_PEER_KEYS_FILE"
	// EnvAuth is "hmac" (default: a key ring is required) or InsecureNone.
	EnvAuth = "SEQFLOW_PEER_AUTH"
	// InsecureNone is the EnvAuth value that runs the push path without a
	// secret. Every peer then accepts any sender that knows the protocol:
	// only for a single-host experiment, never a network anyone else reaches.
	InsecureNone = "insecure-none"
)

// MinKeyBytes is the shortest key accepted: 256 bits, HMAC-SHA256's block
// of security. `openssl rand -base64 32` makes one.
const MinKeyBytes = 32

// MACSize is the length of every MAC this package makes.
const MACSize = sha256.Size

// MaxKeyIDLen bounds a key ID (it travels in every handshake and message).
const MaxKeyIDLen = 64

// Keyring is a set of keys by ID; the first signs, every one verifies.
type Keyring struct {
	ids      []string
	keys     map[string][]byte
	insecure bool
}

// ErrNoKeys means a service that needs a key ring was given none.
var ErrNoKeys = errors.New("peer key ring required: set " + EnvKeysFile + " (or " + EnvKeys + ") to the push transport's key ring, or " + EnvAuth + "=" + InsecureNone + " to run it unauthenticated")

// Parse reads a key ring: "id:base64key" entries separated by commas or
// newlines, blank lines and "#" comments ignored. IDs are unique, of
// letters, digits, '-', '_' and '.', at most MaxKeyIDLen long; keys are
// standard or URL base64 (padded or not) of at least MinKeyBytes bytes.
func Parse(s string) (*Keyring, error) {
	k := &Keyring{keys: map[string][]byte{}}
	for _, line := range strings.FieldsFunc(s, func(r rune) bool { return r == '\n' || r == ',' }) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		id, b64, ok := strings.Cut(line, ":")
		id, b64 = strings.TrimSpace(id), strings.TrimSpace(b64)
		if !ok || !validID(id) {
			return nil, fmt.Errorf("peer key entry %q: want id:base64key with an id of [A-Za-z0-9._-]{1,%d}", redact(line), MaxKeyIDLen)
		}
		if _, dup := k.keys[id]; dup {
			return nil, fmt.Errorf("peer key %q appears twice", id)
		}
		key, err := decodeKey(b64)
		if err != nil {
			return nil, fmt.Errorf("peer key %q: %w", id, err)
		}
		k.ids = append(k.ids, id)
		k.keys[id] = key
	}
	if len(k.ids) == 0 {
		return nil, errors.New("peer key ring is empty")
	}
	return k, nil
}

// redact keeps an entry's ID and hides its key in error messages.
func redact(line string) string {
	if id, _, ok := strings.Cut(line, ":"); ok {
		return id + ":…"
	}
	if len(line) > 8 {
		return line[:4] + "…"
	}
	return line
}

func validID(id string) bool {
	if id == "" || len(id) > MaxKeyIDLen {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

func decodeKey(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			if len(b) < MinKeyBytes {
				return nil, fmt.Errorf("key of %d bytes, want at least %d", len(b), MinKeyBytes)
			}
			return b, nil
		}
	}
	return nil, errors.New("key is not base64")
}

// Insecure returns the ring of SEQFLOW_PEER_AUTH=insecure-none: one
// published key, so the protocol is the same but proves nothing. Peers
// running it reach each other and no peer holding a real ring.
func Insecure() *Keyring {
	return &Keyring{ids: []string{InsecureNone}, keys: map[string][]byte{InsecureNone: []byte("seqflow insecure-none peer key, public by design")}, insecure: true}
}

// IsInsecure reports whether k is the Insecure ring.
func (k *Keyring) IsInsecure() bool { return k.insecure }

// SigningID is the ID of the key that signs: the ring's first.
func (k *Keyring) SigningID() string { return k.ids[0] }

// IDs lists the ring's key IDs, the signing key first.
func (k *Keyring) IDs() []string { return append([]string(nil), k.ids...) }

// Key returns the key of id, false when the ring does not hold it.
func (k *Keyring) Key(id string) ([]byte, bool) {
	b, ok := k.keys[id]
	return b, ok
}

// MAC returns HMAC-SHA256 under key of the parts, each prefixed with its
// length so no two part lists share an encoding.
func MAC(key []byte, parts ...[]byte) []byte {
	h := hmac.New(sha256.New, key)
	var n [4]byte
	for _, p := range parts {
		n[0], n[1], n[2], n[3] = byte(len(p)>>24), byte(len(p)>>16), byte(len(p)>>8), byte(len(p))
		h.Write(n[:])
		h.Write(p)
	}
	return h.Sum(nil)
}

// Equal compares two MACs in constant time.
func Equal(a, b []byte) bool { return hmac.Equal(a, b) }

// Settings are the peer authentication variables as a service's Config
// reads them: Auth (EnvAuth), KeysFile (EnvKeysFile), Keys (EnvKeys).
type Settings struct{ Auth, KeysFile, Keys string }

// Load reads the settings through lookup (the test kit's services'
// environment); see Settings.Ring.
func Load(lookup func(string) (string, bool)) (*Keyring, error) {
	get := func(k string) string {
		v, _ := lookup(k)
		return v
	}
	return Settings{Auth: get(EnvAuth), KeysFile: get(EnvKeysFile), Keys: get(EnvKeys)}.Ring()
}

// Ring returns the ring the settings name: the file KeysFile, else Keys,
// else, when Auth is InsecureNone, the Insecure ring; with none of them it
// returns ErrNoKeys, so a service without a key refuses to start.
func (s Settings) Ring() (*Keyring, error) {
	mode := strings.TrimSpace(s.Auth)
	switch mode {
	case "", "hmac":
	case InsecureNone:
		return Insecure(), nil
	default:
		return nil, fmt.Errorf("%s=%q: want hmac or %s", EnvAuth, mode, InsecureNone)
	}
	if path := strings.TrimSpace(s.KeysFile); path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("%s: read the peer key ring: %w", EnvKeysFile, err)
		}
		k, err := Parse(string(b))
		if err != nil {
			return nil, fmt.Errorf("%s=%s: %w", EnvKeysFile, path, err)
		}
		return k, nil
	}
	if v := strings.TrimSpace(s.Keys); v != "" {
		k, err := Parse(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", EnvKeys, err)
		}
		return k, nil
	}
	return nil, ErrNoKeys
}

// NewEntry returns a ring entry "id:base64key" with a fresh random key of
// MinKeyBytes, for tests and for tools that make a ring.
func NewEntry(id string) string {
	b := make([]byte, MinKeyBytes)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return id + ":" + base64.StdEncoding.EncodeToString(b)
}
