package main

import (
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	pathpkg "path"
	"regexp"
	"strings"
	"testing"

	"github.com/seqflow/seqflow/internal/config"
)

// webRoutes builds the gateway's client routes from env without
// connecting anything: the routes these tests reach need only the config,
// the token verifier and signer and the metrics that New makes, none of
// the components Run wires once its clients are open.
func webRoutes(t *testing.T, set map[string]string) http.Handler {
	t.Helper()
	env := baseEnv()
	for k, v := range set {
		env[k] = v
	}
	cfg, err := LoadConfig(config.FromMap(env))
	if err != nil {
		t.Fatal(err)
	}
	g, err := New(cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return newAPI(g.cfg, g.verifier, g.signer, g.gate, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, g.log, g.m, g.now).routes()
}

func TestWebConfig(t *testing.T) {
	cases := []struct {
		name    string
		set     map[string]string
		want    bool
		wantErr string
	}{
		{name: "off by default", want: false},
		{name: "on with dev mode", set: map[string]string{"GATEWAY_DEV_MODE": "true"}, want: true},
		{name: "off in dev mode when asked", set: map[string]string{"GATEWAY_DEV_MODE": "true", "GATEWAY_WEB": "false"}, want: false},
		{name: "on without dev mode when asked", set: map[string]string{"GATEWAY_WEB": "true"}, want: true},
		{name: "not a bool", set: map[string]string{"GATEWAY_WEB": "maybe"}, wantErr: "GATEWAY_WEB"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := baseEnv()
			for k, v := range c.set {
				env[k] = v
			}
			cfg, err := LoadConfig(config.FromMap(env))
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("err = %v, want one mentioning %q", err, c.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Web != c.want {
				t.Fatalf("Web = %v, want %v", cfg.Web, c.want)
			}
		})
	}
}

func TestWebRoutes(t *testing.T) {
	on := webRoutes(t, map[string]string{"GATEWAY_DEV_MODE": "true"})
	off := webRoutes(t, map[string]string{"GATEWAY_DEV_MODE": "true", "GATEWAY_WEB": "false"})
	cases := []struct {
		name       string
		h          http.Handler
		method     string
		path       string
		wantStatus int
		wantType   string // Content-Type prefix
		wantBody   string // substring
		page       bool   // a page response: carries the page's headers
	}{
		{name: "index", h: on, method: "GET", path: "/", wantStatus: 200, wantType: "text/html", wantBody: `<script type="module" src="/app/app.js"`, page: true},
		{name: "index HEAD", h: on, method: "HEAD", path: "/", wantStatus: 200, wantType: "text/html", page: true},
		{name: "script", h: on, method: "GET", path: "/app/app.js", wantStatus: 200, wantType: "text/javascript", wantBody: "from '/sdk/index.js'", page: true},
		{name: "style", h: on, method: "GET", path: "/app/app.css", wantStatus: 200, wantType: "text/css", wantBody: "#messages", page: true},
		{name: "SDK entry", h: on, method: "GET", path: "/sdk/index.js", wantStatus: 200, wantType: "text/javascript", wantBody: "export { Client", page: true},
		{name: "SDK module", h: on, method: "GET", path: "/sdk/client.js", wantStatus: 200, wantType: "text/javascript", wantBody: "class Client", page: true},
		{name: "no directory listing", h: on, method: "GET", path: "/app/", wantStatus: 404},
		{name: "no SDK listing", h: on, method: "GET", path: "/sdk/", wantStatus: 404},
		{name: "no Node module of the SDK", h: on, method: "GET", path: "/sdk/file-outbox.js", wantStatus: 404},
		{name: "no nested SDK path", h: on, method: "GET", path: "/sdk/x/index.js", wantStatus: 404},
		{name: "missing file", h: on, method: "GET", path: "/app/nope.js", wantStatus: 404},
		{name: "only app files under app", h: on, method: "GET", path: "/app/index.html", wantStatus: 404},
		{name: "other paths stay the API's 404", h: on, method: "GET", path: "/index.html", wantStatus: 404, wantType: "application/json", wantBody: `"unknown_type"`},
		{name: "POST / is not the page", h: on, method: "POST", path: "/", wantStatus: 404, wantType: "application/json"},
		{name: "API unchanged", h: on, method: "GET", path: "/v1/changes", wantStatus: 401, wantType: "application/json", wantBody: `"unauthenticated"`},
		{name: "off: no page", h: off, method: "GET", path: "/", wantStatus: 404, wantType: "application/json"},
		{name: "off: no files", h: off, method: "GET", path: "/app/app.js", wantStatus: 404, wantType: "application/json"},
		{name: "off: no SDK", h: off, method: "GET", path: "/sdk/index.js", wantStatus: 404, wantType: "application/json"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(c.method, c.path, nil)
			c.h.ServeHTTP(rec, req)
			res := rec.Result()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != c.wantStatus {
				t.Fatalf("%s %s = %d %s, want %d", c.method, c.path, res.StatusCode, body, c.wantStatus)
			}
			if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, c.wantType) {
				t.Errorf("Content-Type %q, want %q", ct, c.wantType)
			}
			if !strings.Contains(string(body), c.wantBody) {
				t.Errorf("body lacks %q: %.200s", c.wantBody, body)
			}
			if c.page {
				for k, want := range map[string]string{
					"Content-Security-Policy": webPolicy, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-cache",
				} {
					if got := res.Header.Get(k); got != want {
						t.Errorf("%s = %q, want %q", k, got, want)
					}
				}
			}
		})
	}
}

// TestWebFilesSelfContained holds the page to its rules: nothing from
// another origin (there is no network where it is demoed), every file the
// HTML names is embedded, and no value reaches the DOM as HTML.
func TestWebFilesSelfContained(t *testing.T) {
	index, err := webFiles.ReadFile("web/index.html")
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(string(index), -1)
	if len(refs) < 2 {
		t.Fatalf("index.html names %d files, want the script and the style at least", len(refs))
	}
	for _, r := range refs {
		t.Run("ref "+r[1], func(t *testing.T) {
			if r[1] == "data:," {
				return
			}
			if !webServed(r[1]) {
				t.Fatalf("index.html names %q: want /app/<file> or /sdk/<file>, served from the embed", r[1])
			}
		})
	}
	external := regexp.MustCompile(`(?i)\b(?:https?:)?//[a-z0-9.-]+\.[a-z]{2,}/|@import|url\(\s*['"]?https?:`)
	forbidden := regexp.MustCompile(`\.innerHTML\b|\.outerHTML\b|insertAdjacentHTML|document\.write|\beval\(|new Function\(`)
	err = fs.WalkDir(webFiles, "web", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		t.Run(path, func(t *testing.T) {
			src, err := webFiles.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if m := external.Find(src); m != nil {
				t.Errorf("loads from another origin: %q", m)
			}
			if strings.HasSuffix(path, ".js") {
				if m := forbidden.Find(src); m != nil {
					t.Errorf("uses %q: values must reach the page through textContent", m)
				}
				// Every module a script imports is served from the
				// embed: no bare name (a package such as ws), no node:.
				for _, m := range importRE.FindAllSubmatch(src, -1) {
					spec := string(m[1]) + string(m[2])
					if strings.HasPrefix(spec, "./") {
						spec = "/" + strings.TrimPrefix(pathpkg.Dir(path), "web/") + spec[1:]
					}
					if !webServed(spec) {
						t.Errorf("imports %q: not a file of the embed under /app/ or /sdk/", spec)
					}
				}
			}
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The page runs on the SDK's browser entry, and only on it: the
	// Node-only modules stay out of the embed.
	for _, name := range []string{"web/sdk/index.js", "web/sdk/client.js", "web/sdk/indexeddb-outbox.js"} {
		if _, err := fs.Stat(webFiles, name); err != nil {
			t.Errorf("%s not embedded: %v", name, err)
		}
	}
	for _, name := range []string{"web/sdk/node.js", "web/sdk/file-outbox.js"} {
		if _, err := fs.Stat(webFiles, name); err == nil {
			t.Errorf("%s is embedded: the page must not ship the SDK's Node modules", name)
		}
	}
}

// importRE finds the module specifiers of static imports and re-exports
// (from ... or a bare import '...').
var importRE = regexp.MustCompile(`(?m)^\s*(?:import|export)\b[^'"]*?\bfrom\s*['"]([^'"]+)['"]|^\s*import\s*['"]([^'"]+)['"]`)

// webServed reports whether mountWeb serves ref (an absolute path) from
// the embed: /app/<file> or /sdk/<file>, one segment, the file embedded.
func webServed(ref string) bool {
	for _, dir := range []string{"app", "sdk"} {
		name, ok := strings.CutPrefix(ref, "/"+dir+"/")
		if !ok || name == "" || strings.Contains(name, "/") {
			continue
		}
		if _, err := fs.Stat(webFiles, "web/"+dir+"/"+name); err == nil {
			return true
		}
	}
	return false
}
