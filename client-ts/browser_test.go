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

	user := clienttest.User("web")
	tok, err := signer.Mint(user, "browser", time.Hour)
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
	// Start the browser on bctx itself: started under a phase's timeout,
	// it would end with that phase.
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}

	// page loads the page for one phase and returns what it left in
	// window.result.
	page := func(phase string, params url.Values) pageResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(bctx, 40*time.Second)
		defer cancel()
		params.Set("phase", phase)
		params.Set("token", tok)
		params.Set("user", user)
		if err := chromedp.Do(ctx, chromedp.Navigate(site.URL+"/?"+params.Encode())); err != nil {
			t.Fatalf("%s: open the page: %v", phase, err)
		}
		_, waitErr := chromedp.Run(ctx, chromedp.Poll[bool](`!!(window.result && window.result.done)`, chromedp.WithPollingTimeout(35*time.Second)))
		raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](`JSON.stringify(window.result || null)`))
		if waitErr != nil || err != nil {
			t.Fatalf("%s: the page did not finish: %v %v (result so far: %s)", phase, waitErr, err, raw)
		}
		var res pageResult
		if err := json.Unmarshal([]byte(raw), &res); err != nil {
			t.Fatalf("%s: page result %q: %v", phase, raw, err)
		}
		if res.Error != "" {
			t.Fatalf("%s: page: %s", phase, res.Error)
		}
		res.raw = raw
		return res
	}

	// A group, five sends: each message once, in seq order, at its ACK's seq.
	chat := page("chat", url.Values{})
	if len(chat.Acks) != 5 {
		t.Fatalf("%d ACKs, want 5: %s", len(chat.Acks), chat.raw)
	}
	chat.checkMessages(t, chat.Acks, "b%d")
	if chat.Refused != "HandshakeError 401" {
		t.Fatalf("a refused token in the browser: %q, want HandshakeError 401", chat.Refused)
	}

	// Three sends posted with no gateway reachable, then the page is left;
	// the next page finds them in IndexedDB and resends them.
	off := page("offline", url.Values{"session": {chat.Session}, "dead": {"ws://" + clienttest.FreeAddr(t) + "/v1/ws"}})
	rec := page("recover", url.Values{})
	var ids []string
	for _, a := range off.Acks {
		ids = append(ids, a.ClientMsgID)
	}
	if len(ids) != 3 || fmt.Sprint(rec.Recovered) != fmt.Sprint(ids) {
		t.Fatalf("the reloaded page recovered %v, want the 3 offline posts %v", rec.Recovered, ids)
	}
	if rec.Left == nil || *rec.Left != 0 {
		t.Fatalf("the outbox keeps %v commands after their ACKs, want 0", rec.Left)
	}
	rec.Session = chat.Session
	rec.checkMessages(t, append(chat.Acks, rec.Acks...), "")
}

type pageAck struct {
	ClientMsgID string `json:"clientMsgId"`
	Seq         int64  `json:"seq"`
}

type pageResult struct {
	Error     string    `json:"error"`
	Refused   string    `json:"refused"`
	Session   string    `json:"session"`
	Acks      []pageAck `json:"acks"`
	Recovered []string  `json:"recovered"`
	Left      *int      `json:"left"`
	Events    []struct {
		SessionID   string `json:"session_id"`
		Seq         int64  `json:"seq"`
		Kind        string `json:"kind"`
		ClientMsgID string `json:"client_msg_id"`
		Body        any    `json:"body"`
	} `json:"events"`
	raw string
}

// checkMessages: the session's events come in strictly increasing seq,
// and its chat messages are acks, once each, in order, each at its ACK's
// seq (and with body fmt.Sprintf(body, i) when body is set).
func (r pageResult) checkMessages(t *testing.T, acks []pageAck, body string) {
	t.Helper()
	var last int64
	i := 0
	for _, e := range r.Events {
		if e.SessionID != r.Session {
			continue
		}
		if e.Seq <= last {
			t.Fatalf("seq %d after %d in the browser: %s", e.Seq, last, r.raw)
		}
		last = e.Seq
		if e.Kind != "message" {
			continue
		}
		if i >= len(acks) || e.ClientMsgID != acks[i].ClientMsgID || e.Seq != acks[i].Seq || (body != "" && e.Body != fmt.Sprintf(body, i)) {
			t.Fatalf("message %d in the browser: %+v, ACKs %+v", i, e, acks)
		}
		i++
	}
	if i != len(acks) {
		t.Fatalf("the browser got %d of %d messages: %s", i, len(acks), r.raw)
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
