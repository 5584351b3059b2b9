package admin

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

const (
	opsToken  = "ops-token-0123456789abcdef0123456789"
	dpoToken  = "dpo-token-0123456789abcdef0123456789"
	newToken  = "ops-token-rotated-0123456789abcdef01"
	tokenFile = "ops:" + opsToken + "\n# the data protection officer\n\ndpo:" + dpoToken + "\n"
)

func writeTokens(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// call sends one request to srv and returns the status, the decoded JSON
// body (nil if not JSON) and the raw body.
func call(t *testing.T, srv *httptest.Server, method, path, token, ctype, body string) (int, map[string]any, string) {
	t.Helper()
	req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return resp.StatusCode, out, string(b)
}

// erase is an operator route that records what it was called with.
type erase struct{ calls []string }

func (e *erase) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req struct {
		UserID string `json:"user_id"`
	}
	if err := DecodeJSON(r, &req); err != nil {
		WriteError(w, err)
		return
	}
	e.calls = append(e.calls, req.UserID+" by "+Actor(r.Context()))
	WriteJSON(w, http.StatusOK, map[string]string{"user_id": req.UserID, "actor": Actor(r.Context())})
}

// TestOperatorEndpoints attacks the operator endpoints of an admin server
// (in process, over real HTTP): each refusal leaves the route uncalled,
// and /metrics, /healthz and /readyz stay open.
func TestOperatorEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := &erase{}
	srv := httptest.NewServer((&Server{Reg: reg, Routes: map[string]http.Handler{"POST /erase/user": e},
		Config: Config{TokensFile: writeTokens(t, tokenFile), Pprof: true}}).Handler())
	defer srv.Close()
	form := url.Values{"user_id": {"u1"}}.Encode()
	for _, tt := range []struct {
		name, method, path, token, ctype, body string
		code                                   int
		errCode                                string
	}{
		{"no token", "POST", "/erase/user", "", "application/json", `{"user_id":"u1"}`, 401, CodeUnauthenticated},
		{"wrong token", "POST", "/erase/user", "ops-token-0123456789abcdef012345678X", "application/json", `{"user_id":"u1"}`, 401, CodeUnauthenticated},
		{"a prefix of a token", "POST", "/erase/user", opsToken[:30], "application/json", `{"user_id":"u1"}`, 401, CodeUnauthenticated},
		{"cross-site form post", "POST", "/erase/user", "", "application/x-www-form-urlencoded", form, 401, CodeUnauthenticated},
		{"form post with a token", "POST", "/erase/user", opsToken, "application/x-www-form-urlencoded", form, 415, CodeUnsupportedMediaType},
		{"multipart with a token", "POST", "/erase/user", opsToken, "multipart/form-data; boundary=x", "--x--", 415, CodeUnsupportedMediaType},
		{"text/plain with a token", "POST", "/erase/user", opsToken, "text/plain", `{"user_id":"u1"}`, 415, CodeUnsupportedMediaType},
		{"no content type", "POST", "/erase/user", opsToken, "", `{"user_id":"u1"}`, 415, CodeUnsupportedMediaType},
		{"json latin1", "POST", "/erase/user", opsToken, "application/json; charset=latin1", `{"user_id":"u1"}`, 415, CodeUnsupportedMediaType},
		{"unknown member", "POST", "/erase/user", opsToken, "application/json", `{"user_id":"u1","user":"u2"}`, 400, CodeBadRequest},
		{"repeated member", "POST", "/erase/user", opsToken, "application/json", `{"user_id":"u1","user_id":"u2"}`, 400, CodeBadRequest},
		{"not json", "POST", "/erase/user", opsToken, "application/json", `user_id=u1`, 400, CodeBadRequest},
		{"too large", "POST", "/erase/user", opsToken, "application/json", `{"user_id":"` + strings.Repeat("a", MaxBodyBytes) + `"}`, 413, CodeTooLarge},
		{"pprof without a token", "GET", "/debug/pprof/", "", "", "", 401, CodeUnauthenticated},
		{"profile without a token", "GET", "/debug/pprof/profile?seconds=1", "", "", "", 401, CodeUnauthenticated},
		{"heap with a wrong token", "GET", "/debug/pprof/heap?debug=1", dpoToken + "x", "", "", 401, CodeUnauthenticated},
		{"token in the query", "GET", "/debug/pprof/?access_token=" + opsToken, "", "", "", 401, CodeUnauthenticated},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, raw := call(t, srv, tt.method, tt.path, tt.token, tt.ctype, tt.body)
			if code != tt.code || out["code"] != tt.errCode || out["reason"] == "" {
				t.Errorf("%d %.300s, want %d with code %s and a reason", code, raw, tt.code, tt.errCode)
			}
		})
	}
	if len(e.calls) != 0 {
		t.Fatalf("a refused request reached the route: %v", e.calls)
	}
	// A cookie is no credential.
	req, _ := http.NewRequest("POST", srv.URL+"/erase/user", strings.NewReader(`{"user_id":"u1"}`))
	req.Header.Set("Content-Type", "application/json")
	req.AddCookie(&http.Cookie{Name: "token", Value: opsToken})
	req.AddCookie(&http.Cookie{Name: "Authorization", Value: "Bearer " + opsToken})
	if resp, err := srv.Client().Do(req); err != nil || resp.StatusCode != 401 {
		t.Fatalf("a token in a cookie: %v %v, want 401", resp.Status, err)
	}

	for _, tt := range []struct{ token, actor string }{{opsToken, "ops"}, {dpoToken, "dpo"}} {
		code, out, raw := call(t, srv, "POST", "/erase/user", tt.token, "application/json; charset=utf-8", `{"user_id":"u1"}`)
		if code != 200 || out["actor"] != tt.actor {
			t.Errorf("erase as %s: %d %s", tt.actor, code, raw)
		}
	}
	if code, _, raw := call(t, srv, "GET", "/debug/pprof/heap?debug=1", opsToken, "", ""); code != 200 || !strings.Contains(raw, "heap profile") {
		t.Errorf("pprof with a token: %d %.200q", code, raw)
	}
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		if code, _, _ := call(t, srv, "GET", path, "", "", ""); code != 200 {
			t.Errorf("GET %s without a token: %d, want 200", path, code)
		}
	}
}

// TestOperatorEndpointsWithoutTokens: no tokens file, no operator
// endpoint, whatever the request carries; the reason names the setting.
func TestOperatorEndpointsWithoutTokens(t *testing.T) {
	e := &erase{}
	srv := httptest.NewServer((&Server{Reg: prometheus.NewRegistry(), Routes: map[string]http.Handler{"POST /erase/user": e},
		Config: Config{Pprof: true}}).Handler())
	defer srv.Close()
	for _, path := range []string{"/erase/user", "/debug/pprof/"} {
		method := map[bool]string{true: "POST", false: "GET"}[path == "/erase/user"]
		code, out, raw := call(t, srv, method, path, opsToken, "application/json", `{"user_id":"u1"}`)
		if code != 403 || out["code"] != CodeOperatorAuthOff || !strings.Contains(raw, EnvTokensFile) {
			t.Errorf("%s %s: %d %s, want 403 %s naming %s", method, path, code, raw, CodeOperatorAuthOff, EnvTokensFile)
		}
	}
	if len(e.calls) != 0 {
		t.Fatalf("reached the route: %v", e.calls)
	}
	if code, _, _ := call(t, srv, "GET", "/healthz", "", "", ""); code != 200 {
		t.Errorf("GET /healthz: %d", code)
	}
}

// TestTokensFile: the file's lines, and a rotation without a restart.
func TestTokensFile(t *testing.T) {
	for name, body := range map[string]string{
		"empty":           "# nothing\n\n",
		"no colon":        "ops " + opsToken + "\n",
		"short token":     "ops:short\n",
		"bad name":        "o ps:" + opsToken + "\n",
		"no name":         ":" + opsToken + "\n",
		"repeated token":  "ops:" + opsToken + "\nalice:" + opsToken + "\n",
		"space in token":  "ops:" + opsToken[:20] + " " + opsToken[20:] + "\n",
		"token too short": "ops:" + strings.Repeat("x", MinTokenBytes-1) + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := OpenTokens(writeTokens(t, body))
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), opsToken) || !strings.Contains(err.Error(), EnvTokensFile) {
				t.Errorf("error %q: want the setting named and no token quoted", err)
			}
		})
	}
	if _, err := OpenTokens(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing file accepted")
	}
	if err := (&Server{Addr: "127.0.0.1:0", Reg: prometheus.NewRegistry(),
		Config: Config{TokensFile: writeTokens(t, "ops:short\n")}}).Run(context.Background()); err == nil || !strings.Contains(err.Error(), EnvTokensFile) {
		t.Errorf("Run with a bad tokens file: %v, want a refusal to start naming %s", err, EnvTokensFile)
	}

	path := writeTokens(t, tokenFile)
	tok, err := OpenTokens(path)
	if err != nil {
		t.Fatal(err)
	}
	check := func(token, want string) {
		t.Helper()
		if got, err := tok.actor(token); got != want || err != nil {
			t.Errorf("token %.12s…: %q %v, want %q", token, got, err, want)
		}
	}
	check(opsToken, "ops")
	check(dpoToken, "dpo")
	// Rotation: the old and the new token of ops, both valid, then the old
	// one removed. The mtime moves on for filesystems with coarse times.
	rewrite := func(body string) {
		t.Helper()
		tmp := path + ".new"
		if err := os.WriteFile(tmp, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		later := time.Now().Add(time.Duration(len(body)) * time.Second)
		_ = os.Chtimes(tmp, later, later)
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	rewrite(tokenFile + "ops:" + newToken + "\n")
	check(opsToken, "ops")
	check(newToken, "ops")
	rewrite("ops:" + newToken + "\n")
	check(opsToken, "")
	check(dpoToken, "")
	check(newToken, "ops")
	// A file broken on the way refuses everything, with the reason.
	rewrite("ops:short-and-broken\n")
	if got, err := tok.actor(newToken); got != "" || err == nil {
		t.Errorf("a broken file: %q %v, want a refusal", got, err)
	}
}
