package clientts

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/testkit/clienttest"
)

// runBrowser loads test/browser/index.html in headless Chromium: the SDK's
// browser entry (dist/index.js, as the compiler wrote it) on the platform
// WebSocket, against the real gateway. The page comes from the same origin
// as the gateway, as a deployed page would: the test's server serves dist/
// and the page and proxies /v1/ (the WebSocket included) to the gateway.
func runBrowser(t *testing.T, gw *clienttest.Gateway, signer *auth.Signer) {
	chromium := chromiumPath(t)
	target, _ := url.Parse("http://" + gw.Addr)
	mux := http.NewServeMux()
	mux.Handle("/v1/", httputil.NewSingleHostReverseProxy(target))
	mux.Handle("/dist/", http.StripPrefix("/dist/", http.FileServer(http.Dir("dist"))))
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, "test/browser/index.html") })
	site := httptest.NewServer(mux)
	t.Cleanup(site.Close)

	tok, err := signer.Mint(clienttest.User("web"), "browser", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.NoSandbox,
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 45*time.Second)
	defer cancel()

	if err := chromedp.Do(ctx, chromedp.Navigate(site.URL+"/?token="+url.QueryEscape(tok))); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	_, waitErr := chromedp.Run(ctx, chromedp.Poll[bool](`!!(window.result && window.result.done)`, chromedp.WithPollingTimeout(40*time.Second)))
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(window.result || null)`))
	if waitErr != nil || err != nil {
		t.Fatalf("the page did not finish: %v %v (result so far: %s)", waitErr, err, raw)
	}
	var res struct {
		Error   string `json:"error"`
		Refused string `json:"refused"`
		Session string `json:"session"`
		Acks    []struct {
			ClientMsgID string `json:"clientMsgId"`
			Seq         int64  `json:"seq"`
		} `json:"acks"`
		Events []struct {
			SessionID   string `json:"session_id"`
			Seq         int64  `json:"seq"`
			Kind        string `json:"kind"`
			ClientMsgID string `json:"client_msg_id"`
			Body        any    `json:"body"`
		} `json:"events"`
	}
	if err := json.Unmarshal([]byte(raw), &res); err != nil {
		t.Fatalf("page result %q: %v", raw, err)
	}
	if res.Error != "" {
		t.Fatalf("page: %s", res.Error)
	}
	if len(res.Acks) != 5 {
		t.Fatalf("%d ACKs, want 5: %s", len(res.Acks), raw)
	}
	var msgs []string
	var last int64
	for _, e := range res.Events {
		if e.SessionID != res.Session {
			continue
		}
		if e.Seq <= last {
			t.Fatalf("seq %d after %d in the browser: %s", e.Seq, last, raw)
		}
		last = e.Seq
		if e.Kind == "message" {
			i := len(msgs)
			if i >= len(res.Acks) || e.ClientMsgID != res.Acks[i].ClientMsgID || e.Seq != res.Acks[i].Seq || e.Body != fmt.Sprintf("b%d", i) {
				t.Fatalf("message %d in the browser: %+v, ACKs %+v", i, e, res.Acks)
			}
			msgs = append(msgs, e.ClientMsgID)
		}
	}
	if len(msgs) != 5 {
		t.Fatalf("the browser got %d of 5 messages: %s", len(msgs), raw)
	}
	if res.Refused != "HandshakeError 401" {
		t.Fatalf("a refused token in the browser: %q, want HandshakeError 401", res.Refused)
	}
}

// chromiumPath finds Debian's chromium (the test task installs it:
// `go tool task test:packages`); without it the test fails under
// SEQFLOW_REQUIRE_STACK=1 and is skipped otherwise, like producer-gw's
// browser test.
func chromiumPath(t *testing.T) string {
	t.Helper()
	path := os.Getenv("SEQFLOW_CHROMIUM")
	if path == "" {
		path = "/usr/bin/chromium"
	}
	if _, err := exec.LookPath(path); err != nil {
		msg := fmt.Sprintf("chromium not found at %s (%v): `go tool task test:packages` installs it, or set SEQFLOW_CHROMIUM", path, err)
		if os.Getenv("SEQFLOW_REQUIRE_STACK") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}
