package auth

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

// FuzzVerify feeds arbitrary bearer tokens (outside input: any client sends
// one) to an HS256 verifier: it must never panic, every rejection must be
// ErrMissingToken or a *TokenError, and an accepted token must be HS256,
// unexpired and name IDs that pass ValidID.
func FuzzVerify(f *testing.F) {
	secret := []byte("fuzz-secret-fuzz-secret-fuzz-secret!")
	s, _ := NewHS256Signer(secret)
	at := time.Unix(1_800_000_000, 0)
	s.now = func() time.Time { return at }
	good, _ := s.Mint("alice", "phone", time.Hour)
	expired, _ := s.Mint("alice", "phone", -time.Hour)
	b64 := base64.RawURLEncoding.EncodeToString
	none := b64([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + b64([]byte(`{"sub":"alice","device_id":"p","exp":1900000000}`)) + "."
	for _, seed := range []string{good, expired, none, "", "a.b.c", strings.Repeat("x", MaxTokenBytes+1), good[:len(good)-2]} {
		f.Add(seed)
	}
	v, _ := NewHS256Verifier(secret)
	v.now = func() time.Time { return at }
	f.Fuzz(func(t *testing.T, token string) {
		p, err := v.Verify(token)
		if err != nil {
			var te *TokenError
			if !errors.Is(err, ErrMissingToken) && !errors.As(err, &te) {
				t.Fatalf("rejection %T %v is neither ErrMissingToken nor *TokenError", err, err)
			}
			return
		}
		head, _, _ := strings.Cut(token, ".")
		hb, derr := base64.RawURLEncoding.DecodeString(head)
		var h struct {
			Alg string `json:"alg"`
		}
		if derr != nil || json.Unmarshal(hb, &h) != nil || h.Alg != "HS256" {
			t.Fatalf("accepted a token whose header is %q", hb)
		}
		if ValidID(p.UserID) != nil || ValidID(p.DeviceID) != nil {
			t.Fatalf("accepted IDs %q %q", p.UserID, p.DeviceID)
		}
		if !p.ExpiresAt.After(at.Add(-v.leeway)) {
			t.Fatalf("accepted a token that expired at %v", p.ExpiresAt)
		}
	})
}
