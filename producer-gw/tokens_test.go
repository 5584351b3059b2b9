package main

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/auth"
)

// TestSignOutCheckFailsClosed attacks the sign-out check with a Redis
// outage: a token whose device's sign-out cannot be read is refused with
// a retryable unavailable (HTTP and the WebSocket handshake), never let
// through, and works again once Redis answers.
func TestSignOutCheckFailsClosed(t *testing.T) {
	p := newPipelineNoProcs(t)
	px := newTCPProxy(t, p.st.RedisAddr)
	gw := p.gateway(map[string]string{"SEQFLOW_REDIS_ADDR": px.addr()})
	u := user("outage")
	if code, f := httpCall(t, gw, p.token(u, "phone", time.Hour), "GET", "/v1/changes", ""); code != http.StatusOK {
		t.Fatalf("with Redis up: %d %+v", code, f)
	}
	px.stop()
	// Devices never checked before: nothing of theirs is cached.
	tok := p.token(u, "tablet", time.Hour)
	code, f := httpCall(t, gw, tok, "GET", "/v1/changes", "")
	if code != http.StatusServiceUnavailable || f.Error.Name != "unavailable" || !f.Error.Retryable {
		t.Fatalf("with Redis down: %d %+v, want 503 unavailable, retryable (the sign-out could not be checked)", code, f)
	}
	if _, resp, err := dial(t, gw, p.token(u, "laptop", time.Hour)); err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("WebSocket with Redis down: %v %v, want the handshake refused 503", resp, err)
	}
	px.start()
	deadline := time.Now().Add(15 * time.Second)
	for {
		code, f := httpCall(t, gw, tok, "GET", "/v1/changes", "")
		if code == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis back: %d %+v", code, f)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestTokenPolicy attacks the gateway's token checks: with
// GATEWAY_JWT_AUDIENCE and GATEWAY_JWT_ISSUER pinned, a token for another
// audience or from another issuer is refused, and no token may live longer
// than GATEWAY_DEVICE_RETENTION (the sign-out it must not outlive), over
// HTTP and WebSocket.
func TestTokenPolicy(t *testing.T) {
	p := newPipelineNoProcs(t)
	gw := p.gateway(map[string]string{"GATEWAY_JWT_AUDIENCE": "seqflow-chat", "GATEWAY_JWT_ISSUER": "https://id.example",
		"GATEWAY_DEVICE_RETENTION": "48h"})
	mint := func(aud, iss string, ttl time.Duration) string {
		s, err := auth.NewHS256Signer([]byte(testSecret))
		if err != nil {
			t.Fatal(err)
		}
		s.Audience, s.Issuer = aud, iss
		tok, err := s.Mint(user("tok"), "phone", ttl)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	for _, c := range []struct {
		name  string
		token string
		want  int
	}{
		{"pinned", mint("seqflow-chat", "https://id.example", time.Hour), http.StatusOK},
		{"up to the retention", mint("seqflow-chat", "https://id.example", 47*time.Hour), http.StatusOK},
		{"no audience", mint("", "https://id.example", time.Hour), http.StatusUnauthorized},
		{"another audience", mint("billing", "https://id.example", time.Hour), http.StatusUnauthorized},
		{"another issuer", mint("seqflow-chat", "https://evil.example", time.Hour), http.StatusUnauthorized},
		{"outlives the retention", mint("seqflow-chat", "https://id.example", 30*24*time.Hour), http.StatusUnauthorized},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, f := httpCall(t, gw, c.token, "GET", "/v1/changes", "")
			if code != c.want {
				t.Fatalf("HTTP: %d %+v, want %d", code, f, c.want)
			}
			_, resp, err := dial(t, gw, c.token)
			if c.want == http.StatusOK && err != nil || c.want != http.StatusOK && (err == nil || resp == nil || resp.StatusCode != c.want) {
				t.Fatalf("WebSocket: %v %v, want %d", resp, err, c.want)
			}
			if c.want != http.StatusOK {
				t.Log(f.Error.Message)
			}
		})
	}
	// Dev login mints what the gateway accepts.
	dev := p.gateway(map[string]string{"GATEWAY_JWT_AUDIENCE": "seqflow-chat", "GATEWAY_JWT_ISSUER": "https://id.example", "GATEWAY_DEV_MODE": "true"})
	resp, err := http.Post("http://"+dev.addr+"/v1/dev/login", "application/json", strings.NewReader(`{"user_id":"`+user("dev")+`","device_id":"web"}`))
	if err != nil {
		t.Fatal(err)
	}
	var login struct{ Token string }
	err = json.NewDecoder(resp.Body).Decode(&login)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || login.Token == "" {
		t.Fatalf("dev login: %d %v", resp.StatusCode, err)
	}
	if code, f := httpCall(t, dev, login.Token, "GET", "/v1/changes", ""); code != http.StatusOK {
		t.Fatalf("a dev-login token: %d %+v", code, f)
	}
}
