package auth

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/seqflow/seqflow/schemas/imv1"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

func claims(sub, dev string, exp time.Time) jwt.MapClaims {
	c := jwt.MapClaims{}
	if sub != "" {
		c["sub"] = sub
	}
	if dev != "" {
		c["device_id"] = dev
	}
	if !exp.IsZero() {
		c["exp"] = exp.Unix()
	}
	return c
}

func sign(t *testing.T, m jwt.SigningMethod, key any, c jwt.Claims) string {
	t.Helper()
	s, err := jwt.NewWithClaims(m, c).SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestVerify(t *testing.T) {
	now := time.Now()
	later := now.Add(time.Hour)
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	_, otherPriv, _ := ed25519.GenerateKey(rand.Reader)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	hs, _ := NewHS256Verifier(secret)
	ed, _ := NewEd25519Verifier(pub)
	none := sign(t, jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, claims("u1", "d1", later))

	cases := []struct {
		name     string
		v        *Verifier
		token    string
		wantErr  bool
		wantCode imv1.ErrorCode
	}{
		{"hs256 ok", hs, sign(t, jwt.SigningMethodHS256, secret, claims("u1", "d1", later)), false, 0},
		{"ed25519 ok", ed, sign(t, jwt.SigningMethodEdDSA, priv, claims("u1", "d1", later)), false, 0},
		{"missing", hs, "", true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		{"garbage", hs, "not.a.jwt", true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		{"oversized", hs, strings.Repeat("a", MaxTokenBytes+1), true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		{"expired", hs, sign(t, jwt.SigningMethodHS256, secret, claims("u1", "d1", now.Add(-time.Minute))), true, imv1.ErrorCode_ERROR_CODE_TOKEN_EXPIRED},
		{"expired ed25519", ed, sign(t, jwt.SigningMethodEdDSA, priv, claims("u1", "d1", now.Add(-time.Minute))), true, imv1.ErrorCode_ERROR_CODE_TOKEN_EXPIRED},
		{"within leeway", hs, sign(t, jwt.SigningMethodHS256, secret, claims("u1", "d1", now.Add(-2*time.Second))), false, 0},
		{"not yet valid", hs, sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "u1", "device_id": "d1", "exp": later.Unix(), "nbf": later.Add(-time.Minute).Unix()}), true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		{"wrong hs256 secret", hs, sign(t, jwt.SigningMethodHS256, []byte("another-secret-another-secret-xx"), claims("u1", "d1", later)), true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		{"wrong ed25519 key", ed, sign(t, jwt.SigningMethodEdDSA, otherPriv, claims("u1", "d1", later)), true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		{"alg none", hs, none, true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		{"alg none to ed25519", ed, none, true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		// Key confusion: HS256 signed with the public key bytes as secret.
		{"hs256 with public key as secret", ed, sign(t, jwt.SigningMethodHS256, []byte(pub), claims("u1", "d1", later)), true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		{"eddsa to hs256 verifier", hs, sign(t, jwt.SigningMethodEdDSA, priv, claims("u1", "d1", later)), true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		{"hs512", hs, sign(t, jwt.SigningMethodHS512, secret, claims("u1", "d1", later)), true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		{"rs256", hs, sign(t, jwt.SigningMethodRS256, rsaKey, claims("u1", "d1", later)), true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		{"es256", ed, sign(t, jwt.SigningMethodES256, ecKey, claims("u1", "d1", later)), true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		{"missing sub", hs, sign(t, jwt.SigningMethodHS256, secret, claims("", "d1", later)), true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		{"missing device_id", hs, sign(t, jwt.SigningMethodHS256, secret, claims("u1", "", later)), true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		{"missing exp", hs, sign(t, jwt.SigningMethodHS256, secret, claims("u1", "d1", time.Time{})), true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		{"bad sub alphabet", hs, sign(t, jwt.SigningMethodHS256, secret, claims("u|1", "d1", later)), true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		{"device_id not a string", hs, sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "u1", "device_id": 7, "exp": later.Unix()}), true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		{"platform ok", hs, sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "u1", "device_id": "d1", "platform": "ios", "exp": later.Unix()}), false, 0},
		{"platform bad alphabet", hs, sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "u1", "device_id": "d1", "platform": "iOS", "exp": later.Unix()}), true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		{"platform too long", hs, sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "u1", "device_id": "d1", "platform": strings.Repeat("a", MaxPlatformBytes+1), "exp": later.Unix()}), true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		{"platform not a string", hs, sign(t, jwt.SigningMethodHS256, secret, jwt.MapClaims{"sub": "u1", "device_id": "d1", "platform": 1, "exp": later.Unix()}), true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
		{"sub too long", hs, sign(t, jwt.SigningMethodHS256, secret, claims(strings.Repeat("u", MaxIDBytes+1), "d1", later)), true, imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p, err := c.v.Verify(c.token)
			if !c.wantErr {
				if err != nil {
					t.Fatalf("Verify: %v", err)
				}
				if p.UserID != "u1" || p.DeviceID != "d1" || p.ExpiresAt.IsZero() {
					t.Fatalf("principal = %+v", p)
				}
				return
			}
			if err == nil {
				t.Fatalf("Verify accepted %s: %+v", c.name, p)
			}
			if got := Code(err); got != c.wantCode {
				t.Fatalf("Code(%v) = %v, want %v", err, got, c.wantCode)
			}
		})
	}
}

func TestSignerRoundTrip(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	hsS, _ := NewHS256Signer(secret)
	hsV, _ := NewHS256Verifier(secret)
	edS, _ := NewEd25519Signer(priv)
	edV, _ := NewEd25519Verifier(pub)
	for _, c := range []struct {
		name string
		s    *Signer
		v    *Verifier
	}{{"hs256", hsS, hsV}, {"ed25519", edS, edV}} {
		t.Run(c.name, func(t *testing.T) {
			tok, err := c.s.Mint("alice", "phone-1", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			p, err := c.v.Verify(tok)
			if err != nil || p.UserID != "alice" || p.DeviceID != "phone-1" || p.Platform != "" {
				t.Fatalf("Verify = %+v, %v", p, err)
			}
			// iat is what a sign-out is compared with: it must survive.
			if d := time.Since(p.IssuedAt); p.IssuedAt.IsZero() || d < -time.Second || d > 5*time.Second {
				t.Fatalf("IssuedAt = %v, want about now", p.IssuedAt)
			}
			tok, err = c.s.MintPlatform("alice", "phone-1", "android", time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if p, err = c.v.Verify(tok); err != nil || p.Platform != "android" {
				t.Fatalf("Verify of a platform token = %+v, %v", p, err)
			}
			if _, err := c.s.MintPlatform("alice", "d", "Android!", time.Minute); err == nil {
				t.Fatal("MintPlatform accepted a bad platform")
			}
			if _, err := c.s.Mint("bad id", "d", time.Minute); err == nil {
				t.Fatal("Mint accepted a user id with a space")
			}
		})
	}
}

func TestConstructorsRejectBadKeys(t *testing.T) {
	if _, err := NewHS256Verifier([]byte("short")); err == nil {
		t.Fatal("short secret accepted")
	}
	if _, err := NewEd25519Verifier(make([]byte, 31)); err == nil {
		t.Fatal("31-byte public key accepted")
	}
	if _, err := NewEd25519Signer(make([]byte, 10)); err == nil {
		t.Fatal("10-byte private key accepted")
	}
}

func TestParseKeys(t *testing.T) {
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	pkix, _ := x509.MarshalPKIXPublicKey(pub)
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(priv)
	pubPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pkix}))
	privPEM := string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}))
	for _, c := range []struct {
		name string
		in   string
		ok   bool
	}{
		{"pem", pubPEM, true},
		{"base64", base64.StdEncoding.EncodeToString(pub), true},
		{"base64url raw", base64.RawURLEncoding.EncodeToString(pub), true},
		{"short", base64.StdEncoding.EncodeToString(pub[:16]), false},
		{"not base64", "@@@", false},
		{"private pem as public", privPEM, false},
	} {
		t.Run("public "+c.name, func(t *testing.T) {
			got, err := ParseEd25519PublicKey(c.in)
			if (err == nil) != c.ok || (c.ok && !got.Equal(pub)) {
				t.Fatalf("ParseEd25519PublicKey = %x, %v; want ok=%v", got, err, c.ok)
			}
		})
	}
	for _, c := range []struct {
		name string
		in   string
		ok   bool
	}{
		{"pem", privPEM, true},
		{"seed", base64.StdEncoding.EncodeToString(priv.Seed()), true},
		{"full", base64.StdEncoding.EncodeToString(priv), true},
		{"short", base64.StdEncoding.EncodeToString(priv[:5]), false},
	} {
		t.Run("private "+c.name, func(t *testing.T) {
			got, err := ParseEd25519PrivateKey(c.in)
			if (err == nil) != c.ok || (c.ok && !got.Equal(priv)) {
				t.Fatalf("ParseEd25519PrivateKey = %v; want ok=%v", err, c.ok)
			}
		})
	}
}

// TestVerifyPolicy: a pinned audience and issuer are required, and a token
// may not live longer than the policy's MaxLifetime (the device retention).
func TestVerifyPolicy(t *testing.T) {
	now := time.Now()
	v, _ := NewHS256Verifier(secret)
	v.SetPolicy(Policy{Audience: "seqflow", Issuer: "https://id.example", MaxLifetime: 30 * 24 * time.Hour})
	with := func(edit func(jwt.MapClaims)) string {
		c := claims("u1", "d1", now.Add(time.Hour))
		c["aud"], c["iss"], c["iat"] = "seqflow", "https://id.example", now.Unix()
		edit(c)
		return sign(t, jwt.SigningMethodHS256, secret, c)
	}
	for _, c := range []struct {
		name, token, reason string
	}{
		{"pinned aud and iss", with(func(jwt.MapClaims) {}), ""},
		{"aud among several", with(func(c jwt.MapClaims) { c["aud"] = []string{"other", "seqflow"} }), ""},
		{"no aud", with(func(c jwt.MapClaims) { delete(c, "aud") }), "aud claim is required"},
		{"another aud", with(func(c jwt.MapClaims) { c["aud"] = "billing" }), `claim aud: want "seqflow"`},
		{"no iss", with(func(c jwt.MapClaims) { delete(c, "iss") }), "iss claim is required"},
		{"another iss", with(func(c jwt.MapClaims) { c["iss"] = "https://evil.example" }), `claim iss: want "https://id.example"`},
		{"lives 31 days", with(func(c jwt.MapClaims) { c["exp"] = now.Add(31 * 24 * time.Hour).Unix() }), "longer than the 720h0m0s a device's sign-out is kept"},
		{"no iat, expires in a year", with(func(c jwt.MapClaims) {
			delete(c, "iat")
			c["exp"] = now.Add(365 * 24 * time.Hour).Unix()
		}), "later than the 720h0m0s"},
		{"iat in the future hides its lifetime", with(func(c jwt.MapClaims) {
			c["iat"] = now.Add(300 * 24 * time.Hour).Unix()
			c["exp"] = now.Add(310 * 24 * time.Hour).Unix()
		}), ""}, // the parser refuses an iat in the future: "token used before issued"
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := v.Verify(c.token)
			switch {
			case c.name == "iat in the future hides its lifetime":
				if err == nil {
					t.Fatal("accepted")
				}
			case c.reason == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.reason != "" && (err == nil || !strings.Contains(err.Error(), c.reason)):
				t.Fatalf("err = %v, want one saying %q", err, c.reason)
			case c.reason != "" && Code(err) != imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED:
				t.Fatalf("code %v, want UNAUTHENTICATED", Code(err))
			}
		})
	}
	s, _ := NewHS256Signer(secret)
	s.Audience, s.Issuer = "seqflow", "https://id.example"
	tok, err := s.Mint("u1", "d1", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(tok); err != nil {
		t.Fatalf("a token of a signer with the pinned aud and iss: %v", err)
	}
}
