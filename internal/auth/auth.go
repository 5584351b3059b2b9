// Package auth checks and mints the bearer tokens clients present to the
// gateway: JWTs signed with HS256 (a shared secret) or Ed25519 (EdDSA),
// carrying the user ID in "sub", the device ID in "device_id", optionally
// the device's platform in "platform", the issue time in "iat" (what a
// device's sign-out is compared with), and always an expiry.
package auth

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// MinSecretBytes is the shortest HS256 secret accepted: RFC 7518 asks for a
// key at least as long as the hash output.
const MinSecretBytes = 32

// MaxIDBytes bounds user and device IDs.
const MaxIDBytes = 64

// MaxTokenBytes bounds a token before it is parsed.
const MaxTokenBytes = 4096

// Principal is who a valid token speaks for.
type Principal struct {
	UserID   string
	DeviceID string
	// Platform is the token's "platform" claim, "" when it has none.
	Platform string
	// IssuedAt is the token's "iat", the zero time when it has none: such
	// a token counts as issued before any sign-out of its device.
	IssuedAt  time.Time
	ExpiresAt time.Time
}

// Claims is the JWT payload seqflow issues and accepts.
type Claims struct {
	DeviceID string `json:"device_id"`
	// Platform is optional: ios, android, web, desktop, ... (ValidPlatform).
	// When the issuer sets it, the client cannot claim another.
	Platform string `json:"platform,omitempty"`
	jwt.RegisteredClaims
}

// Verifier checks tokens. It accepts exactly one algorithm, the one its key
// is for, so a token signed with another algorithm (including "none", or
// HS256 with the public Ed25519 key as secret) is rejected.
type Verifier struct {
	alg    string
	key    any
	leeway time.Duration
	now    func() time.Time
	policy Policy
}

// Policy is what a Verifier asks of a token beyond its signature and
// expiry. The zero Policy asks nothing more.
type Policy struct {
	// Audience, when set, must be one of the token's "aud".
	Audience string
	// Issuer, when set, must be the token's "iss".
	Issuer string
	// MaxLifetime, when > 0, bounds a token's lifetime: exp - iat, and
	// exp - now (a token without iat, or one whose iat lies). A device's
	// sign-out is kept only so long (GATEWAY_DEVICE_RETENTION): a longer
	// token of a signed-out device would work again once it is forgotten.
	MaxLifetime time.Duration
}

// SetPolicy makes v ask p of every token. Call it before v is used.
func (v *Verifier) SetPolicy(p Policy) { v.policy = p }

// NewHS256Verifier accepts HS256 tokens signed with secret.
func NewHS256Verifier(secret []byte) (*Verifier, error) {
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("HS256 secret is %d bytes, want at least %d", len(secret), MinSecretBytes)
	}
	return &Verifier{alg: jwt.SigningMethodHS256.Alg(), key: secret, leeway: 5 * time.Second, now: time.Now}, nil
}

// NewEd25519Verifier accepts EdDSA tokens signed with pub's private key.
func NewEd25519Verifier(pub ed25519.PublicKey) (*Verifier, error) {
	if len(pub) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("ed25519 public key is %d bytes, want %d", len(pub), ed25519.PublicKeySize)
	}
	return &Verifier{alg: jwt.SigningMethodEdDSA.Alg(), key: pub, leeway: 5 * time.Second, now: time.Now}, nil
}

// Alg is the one algorithm v accepts ("HS256" or "EdDSA").
func (v *Verifier) Alg() string { return v.alg }

// Verify parses token and returns its principal, or a *TokenError.
func (v *Verifier) Verify(token string) (Principal, error) {
	if token == "" {
		return Principal{}, ErrMissingToken
	}
	if len(token) > MaxTokenBytes {
		return Principal{}, &TokenError{Reason: fmt.Sprintf("token is over %d bytes", MaxTokenBytes)}
	}
	opts := []jwt.ParserOption{
		jwt.WithValidMethods([]string{v.alg}),
		jwt.WithExpirationRequired(),
		jwt.WithLeeway(v.leeway),
		jwt.WithTimeFunc(v.now),
	}
	if v.policy.Audience != "" {
		opts = append(opts, jwt.WithAudience(v.policy.Audience))
	}
	if v.policy.Issuer != "" {
		opts = append(opts, jwt.WithIssuer(v.policy.Issuer))
	}
	var c Claims
	_, err := jwt.NewParser(opts...).ParseWithClaims(token, &c, func(*jwt.Token) (any, error) { return v.key, nil })
	switch {
	case errors.Is(err, jwt.ErrTokenExpired):
		return Principal{}, &TokenError{Reason: "token expired", Expired: true}
	case errors.Is(err, jwt.ErrTokenInvalidAudience):
		return Principal{}, &TokenError{Reason: fmt.Sprintf("claim aud: want %q", v.policy.Audience)}
	case errors.Is(err, jwt.ErrTokenInvalidIssuer):
		return Principal{}, &TokenError{Reason: fmt.Sprintf("claim iss: want %q", v.policy.Issuer)}
	case err != nil:
		return Principal{}, &TokenError{Reason: err.Error()}
	}
	if max := v.policy.MaxLifetime; max > 0 {
		exp := c.ExpiresAt.Time
		if c.IssuedAt != nil && exp.Sub(c.IssuedAt.Time) > max {
			return Principal{}, &TokenError{Reason: fmt.Sprintf("token lives %s (iat to exp), longer than the %s a device's sign-out is kept", exp.Sub(c.IssuedAt.Time), max)}
		}
		if left := exp.Sub(v.now()); left > max+v.leeway {
			return Principal{}, &TokenError{Reason: fmt.Sprintf("token expires in %s, later than the %s a device's sign-out is kept", left.Round(time.Second), max)}
		}
	}
	if err := ValidID(c.Subject); err != nil {
		return Principal{}, &TokenError{Reason: "claim sub: " + err.Error()}
	}
	if err := ValidID(c.DeviceID); err != nil {
		return Principal{}, &TokenError{Reason: "claim device_id: " + err.Error()}
	}
	if c.Platform != "" {
		if err := ValidPlatform(c.Platform); err != nil {
			return Principal{}, &TokenError{Reason: "claim platform: " + err.Error()}
		}
	}
	pr := Principal{UserID: c.Subject, DeviceID: c.DeviceID, Platform: c.Platform, ExpiresAt: c.ExpiresAt.Time}
	if c.IssuedAt != nil {
		pr.IssuedAt = c.IssuedAt.Time
	}
	return pr, nil
}

// MaxPlatformBytes bounds a platform name.
const MaxPlatformBytes = 16

// ValidPlatform checks a platform name: 1..MaxPlatformBytes of [a-z0-9_-].
// Any such name is accepted; clients use ios, android, web, desktop,
// tablet or cli (docs/protocol.md, "Devices and presence").
func ValidPlatform(p string) error {
	if p == "" {
		return errors.New("missing")
	}
	if len(p) > MaxPlatformBytes {
		return fmt.Errorf("over %d bytes", MaxPlatformBytes)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return fmt.Errorf("byte %q not allowed (want [a-z0-9_-])", c)
		}
	}
	return nil
}

// ValidID checks a user or device ID: 1..MaxIDBytes of [A-Za-z0-9._:@-].
// The alphabet keeps IDs safe inside Redis keys, presence values (which use
// '|' as separator) and URLs.
func ValidID(id string) error {
	if id == "" {
		return errors.New("missing")
	}
	if len(id) > MaxIDBytes {
		return fmt.Errorf("over %d bytes", MaxIDBytes)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("._:@-", c) >= 0) {
			return fmt.Errorf("byte %q not allowed (want [A-Za-z0-9._:@-])", c)
		}
	}
	return nil
}

// Signer mints tokens, for development tools and tests.
type Signer struct {
	method jwt.SigningMethod
	key    any
	now    func() time.Time
	// Audience and Issuer, when set, go into every token's "aud" and "iss"
	// (what a Verifier's Policy pins).
	Audience, Issuer string
}

// NewHS256Signer signs with secret.
func NewHS256Signer(secret []byte) (*Signer, error) {
	if len(secret) < MinSecretBytes {
		return nil, fmt.Errorf("HS256 secret is %d bytes, want at least %d", len(secret), MinSecretBytes)
	}
	return &Signer{method: jwt.SigningMethodHS256, key: secret, now: time.Now}, nil
}

// NewEd25519Signer signs with priv.
func NewEd25519Signer(priv ed25519.PrivateKey) (*Signer, error) {
	if len(priv) != ed25519.PrivateKeySize {
		return nil, fmt.Errorf("ed25519 private key is %d bytes, want %d", len(priv), ed25519.PrivateKeySize)
	}
	return &Signer{method: jwt.SigningMethodEdDSA, key: priv, now: time.Now}, nil
}

// Mint returns a token for user and device valid for ttl.
func (s *Signer) Mint(userID, deviceID string, ttl time.Duration) (string, error) {
	return s.MintPlatform(userID, deviceID, "", ttl)
}

// MintPlatform is Mint with a platform claim ("" for none).
func (s *Signer) MintPlatform(userID, deviceID, platform string, ttl time.Duration) (string, error) {
	if err := ValidID(userID); err != nil {
		return "", fmt.Errorf("user id: %w", err)
	}
	if err := ValidID(deviceID); err != nil {
		return "", fmt.Errorf("device id: %w", err)
	}
	if platform != "" {
		if err := ValidPlatform(platform); err != nil {
			return "", fmt.Errorf("platform: %w", err)
		}
	}
	now := s.now()
	c := Claims{DeviceID: deviceID, Platform: platform, RegisteredClaims: jwt.RegisteredClaims{
		Subject: userID, Issuer: s.Issuer, IssuedAt: jwt.NewNumericDate(now), ExpiresAt: jwt.NewNumericDate(now.Add(ttl)),
	}}
	if s.Audience != "" {
		c.Audience = jwt.ClaimStrings{s.Audience}
	}
	return jwt.NewWithClaims(s.method, c).SignedString(s.key)
}

// BearerToken returns the token of an "Authorization: Bearer <token>"
// header, or "" when there is none.
func BearerToken(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// ParseEd25519PublicKey reads a public key given as PEM (PKIX) or as
// base64 (standard or URL alphabet, padded or not) of the 32 raw bytes.
func ParseEd25519PublicKey(s string) (ed25519.PublicKey, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "-----BEGIN") {
		b, _ := pem.Decode([]byte(s))
		if b == nil {
			return nil, errors.New("ed25519 public key: bad PEM")
		}
		k, err := x509.ParsePKIXPublicKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("ed25519 public key: %w", err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("ed25519 public key: PEM holds a %T", k)
		}
		return pub, nil
	}
	raw, err := decodeBase64(s)
	if err != nil || len(raw) != ed25519.PublicKeySize {
		return nil, fmt.Errorf("ed25519 public key: want PEM or base64 of %d bytes", ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(raw), nil
}

// ParseEd25519PrivateKey reads a private key given as PEM (PKCS#8) or as
// base64 of the 32-byte seed or the 64-byte key.
func ParseEd25519PrivateKey(s string) (ed25519.PrivateKey, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "-----BEGIN") {
		b, _ := pem.Decode([]byte(s))
		if b == nil {
			return nil, errors.New("ed25519 private key: bad PEM")
		}
		k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("ed25519 private key: %w", err)
		}
		priv, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("ed25519 private key: PEM holds a %T", k)
		}
		return priv, nil
	}
	raw, err := decodeBase64(s)
	switch {
	case err == nil && len(raw) == ed25519.SeedSize:
		return ed25519.NewKeyFromSeed(raw), nil
	case err == nil && len(raw) == ed25519.PrivateKeySize:
		return ed25519.PrivateKey(raw), nil
	}
	return nil, fmt.Errorf("ed25519 private key: want PEM or base64 of a %d-byte seed or %d-byte key", ed25519.SeedSize, ed25519.PrivateKeySize)
}

func decodeBase64(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}
