package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/keystore"
	"github.com/seqflow/seqflow/internal/testkit/proc"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// adminCall is one request to an admin port: its status, its JSON body
// (nil if none) and the raw body.
func adminCall(t *testing.T, method, rawURL, token, ctype, body string) (int, map[string]any, string) {
	t.Helper()
	req, err := http.NewRequest(method, rawURL, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, out, string(b)
}

// adminOf starts a gateway of p with a KEK, an admin port and over, and
// returns it and its admin base URL.
func adminOf(t *testing.T, p *pipeline, over map[string]string) (*testGW, string) {
	t.Helper()
	kb := make([]byte, keystore.KeyBytes)
	_, _ = rand.Read(kb)
	env := map[string]string{"SEQFLOW_KEK": base64.StdEncoding.EncodeToString(kb), "GATEWAY_ADMIN_ADDR": proc.AnyPort}
	for k, v := range over {
		env[k] = v
	}
	gw := p.gateway(env)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	addr, err := gw.g.AdminAddr(ctx)
	if err != nil {
		t.Fatalf("admin server did not listen: %v", err)
	}
	return gw, "http://" + addr
}

// TestAdminPlaneAuth attacks the gateway's admin port (POST /erase/user,
// irreversible) as a stranger and as a page in the operator's browser
// would: no token, a wrong one, a cross-site form post, a form post even
// with the token, a token in a cookie. Each is refused with a stable code
// and erases nothing (bob keeps his key, his membership and his sends).
// Probes and Prometheus still reach /metrics, /healthz and /readyz without
// a token, pprof is 404 unless SEQFLOW_ADMIN_PPROF, and then 401 without
// the token. An authenticated JSON erasure works and records the token's
// name as its actor: in the answer, the key store and the log's erasure
// record.
func TestAdminPlaneAuth(t *testing.T) {
	p := newPipeline(t)
	const token, wrong = "dpo-token-9f2c4e1a7b3d5f60819a2b3c4d5e6f70", "dpo-token-9f2c4e1a7b3d5f60819a2b3c4d5e6f71"
	tokens := filepath.Join(t.TempDir(), "admin-tokens")
	if err := os.WriteFile(tokens, []byte("dpo-ticket-7:"+token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	gw, admin := adminOf(t, p, map[string]string{"SEQFLOW_ADMIN_TOKENS_FILE": tokens})
	alice, bob := user("alice"), user("bob")
	ca, cb := p.connect(gw, alice, "d1"), p.connect(gw, bob, "d1")
	sid, _ := createGroup(ca, bob)
	id := newID()
	cb.send(sendFrame(sid, id, "hello"))
	p.waitStored(sid, cb.mustAckOK(id).Seq)

	erase := admin + "/erase/user"
	body := `{"user_id":"` + bob + `"}`
	form := url.Values{"user_id": {bob}, "user": {bob}, "actor": {"evil"}}.Encode()
	for _, tt := range []struct {
		name, token, ctype, body string
		code                     int
		errCode                  string
	}{
		{"no token", "", "application/json", body, 401, "unauthenticated"},
		{"wrong token", wrong, "application/json", body, 401, "unauthenticated"},
		{"cross-site form post", "", "application/x-www-form-urlencoded", form, 401, "unauthenticated"},
		{"cross-site text/plain post", "", "text/plain", body, 401, "unauthenticated"},
		{"form post with the token", token, "application/x-www-form-urlencoded", form, 415, "unsupported_media_type"},
		{"text/plain with the token", token, "text/plain", body, 415, "unsupported_media_type"},
		{"an actor of the caller's choosing", token, "application/json", `{"user_id":"` + bob + `","actor":"someone-else"}`, 400, "bad_request"},
		{"no user_id", token, "application/json", `{}`, 400, "bad_request"},
		{"an invalid user_id", token, "application/json", `{"user_id":"bob smith"}`, 400, "bad_request"},
		{"the old form names as JSON", token, "application/json", `{"user":"` + bob + `"}`, 400, "bad_request"},
	} {
		code, out, raw := adminCall(t, "POST", erase, tt.token, tt.ctype, tt.body)
		if code != tt.code || out["code"] != tt.errCode || out["reason"] == "" {
			t.Errorf("%s: %d %s, want %d %s with a reason", tt.name, code, raw, tt.code, tt.errCode)
		}
	}
	req, _ := http.NewRequest("POST", erase, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.AddCookie(&http.Cookie{Name: "token", Value: token})
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a token in a cookie: %v %v, want 401", resp, err)
	} else {
		resp.Body.Close()
	}

	// Nothing was erased: bob is no erased user, still a member, still sends.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var erased bool
	if err := p.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM seqflow_erased_users WHERE user_id = $1)`, bob).Scan(&erased); err != nil || erased {
		t.Fatalf("bob after the refused calls: erased %v (%v)", erased, err)
	}
	id = newID()
	cb.send(sendFrame(sid, id, "still here"))
	cb.mustAckOK(id)

	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if code, _, raw := adminCall(t, "GET", admin+path, "", "", ""); code != 200 {
			t.Errorf("GET %s without a token: %d %.200s, want 200", path, code, raw)
		}
	}
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/profile?seconds=1", "/debug/pprof/heap"} {
		if code, _, _ := adminCall(t, "GET", admin+path, token, "", ""); code != http.StatusNotFound {
			t.Errorf("GET %s without SEQFLOW_ADMIN_PPROF, with the token: %d, want 404", path, code)
		}
	}

	code, out, raw := adminCall(t, "POST", erase, token, "application/json", body)
	if code != http.StatusOK || out["keys_destroyed"] != float64(1) || out["sessions_left"] != float64(1) || out["actor"] != "dpo-ticket-7" {
		t.Fatalf("an authenticated erasure of bob: %d %s, want 1 key, 1 session, actor dpo-ticket-7", code, raw)
	}
	ca.expect("bob's leave", func(f frame) bool {
		return f.Op == wire.OpEvent && f.Event.SessionID == sid && f.Event.Kind == wire.KindMembership &&
			f.Event.Action == wire.ActionRemove && len(f.Event.UserIDs) == 1 && f.Event.UserIDs[0] == bob
	})
	var actor string
	if err := p.pool.QueryRow(ctx, `SELECT actor FROM seqflow_erased_users WHERE user_id = $1`, bob).Scan(&actor); err != nil || actor != "dpo-ticket-7" {
		t.Errorf("the key store's record of bob's erasure: actor %q (%v), want dpo-ticket-7", actor, err)
	}
	var record *imv1.Erasure
	readAll(ctx, t, p, p.topics.Sequenced, func(rec *kgo.Record) {
		var ev imv1.SequencedEvent
		if proto.Unmarshal(rec.Value, &ev) == nil && ev.SessionId == sid && ev.GetMembership().GetErasure() != nil {
			record = ev.GetMembership().GetErasure()
		}
	})
	if record.GetActor() != "dpo-ticket-7" {
		t.Errorf("the erasure record in the log: %v, want actor dpo-ticket-7", record)
	}

	// With pprof on, the profiles are behind the same token.
	_, admin2 := adminOf(t, p, map[string]string{"SEQFLOW_ADMIN_TOKENS_FILE": tokens, "SEQFLOW_ADMIN_PPROF": "true"})
	for _, path := range []string{"/debug/pprof/", "/debug/pprof/profile?seconds=1", "/debug/pprof/heap?debug=1"} {
		if code, out, raw := adminCall(t, "GET", admin2+path, "", "", ""); code != http.StatusUnauthorized || out["code"] != "unauthenticated" {
			t.Errorf("GET %s with SEQFLOW_ADMIN_PPROF, no token: %d %.200s, want 401", path, code, raw)
		}
	}
	if code, _, raw := adminCall(t, "GET", admin2+"/debug/pprof/heap?debug=1", token, "", ""); code != 200 || !strings.Contains(raw, "heap profile") {
		t.Errorf("GET /debug/pprof/heap with the token: %d %.200q", code, raw)
	}
}

// TestAdminPlaneWithoutTokens: a gateway with a KEK and no
// SEQFLOW_ADMIN_TOKENS_FILE refuses every erasure, with a reason naming
// the setting, and still answers its probes.
func TestAdminPlaneWithoutTokens(t *testing.T) {
	p := newPipelineNoProcs(t)
	_, admin := adminOf(t, p, nil)
	code, out, raw := adminCall(t, "POST", admin+"/erase/user", "dpo-token-9f2c4e1a7b3d5f60819a2b3c4d5e6f70", "application/json", `{"user_id":"u1"}`)
	if code != http.StatusForbidden || out["code"] != "operator_auth_off" || !strings.Contains(raw, "SEQFLOW_ADMIN_TOKENS_FILE") {
		t.Errorf("an erasure without a tokens file: %d %s, want 403 operator_auth_off naming SEQFLOW_ADMIN_TOKENS_FILE", code, raw)
	}
	if code, _, _ := adminCall(t, "GET", admin+"/healthz", "", "", ""); code != 200 {
		t.Errorf("GET /healthz: %d", code)
	}
}
