package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/seqflow/seqflow/internal/wire"
)

// TestDevices runs the device list, sign-out, login policy and presence
// query through two real gateways on the real Redis and PostgreSQL, with
// the sequencer, persister and pusher as processes.
func TestDevices(t *testing.T) {
	p := newPipeline(t)
	gwA, gwB := p.gateway(nil), p.gateway(nil)

	t.Run("a sign-out on one gateway closes the device on both with 4002 and its token stops working everywhere", func(t *testing.T) {
		alice := user("alice")
		phoneTok := p.platformToken(alice, "phone", "ios")
		phoneA := dialOK(t, gwA, phoneTok, "")
		phoneB := dialOK(t, gwB, phoneTok, "")
		laptop := dialOK(t, gwA, p.token(alice, "laptop", time.Hour), "platform=desktop")
		if laptop.hello.raw == nil || !strings.Contains(string(laptop.hello.raw), `"platform":"desktop"`) {
			t.Fatalf("hello of a connection with ?platform=desktop: %s", laptop.hello.raw)
		}

		before := deviceList(t, laptop, "l1")
		phone, lap := findDevice(before, "phone"), findDevice(before, "laptop")
		if phone == nil || lap == nil || len(before.Devices) != 2 {
			t.Fatalf("devices = %+v, want phone and laptop", before.Devices)
		}
		if phone.Platform != "ios" || !phone.Online || phone.Connections != 2 || phone.Current {
			t.Fatalf("phone = %+v, want ios, online with 2 connections, not current", *phone)
		}
		if lap.Platform != "desktop" || !lap.Online || lap.Connections != 1 || !lap.Current {
			t.Fatalf("laptop = %+v, want desktop, online, current", *lap)
		}
		if d := time.Since(time.UnixMilli(phone.LastSeenMs)); d < -time.Second || d > 5*time.Second {
			t.Fatalf("an online device's last seen is %v ago, want now", d)
		}

		// Over WebSocket on gateway A; the phone's connection on B closes too.
		laptop.send(map[string]any{"op": "sign_out", "req_id": "so", "device_id": "phone"})
		r := laptop.result("so")
		var res wire.SignOutResult
		mustDecode(t, r.raw, &res)
		if r.Op != wire.OpResult || res.DeviceID != "phone" || res.SignedOutAt < time.Now().Add(-time.Minute).Unix() {
			t.Fatalf("sign_out = %s", r.raw)
		}
		for _, c := range []*client{phoneB, phoneA} {
			waitClose(t, c, closeSignedOut, "signed_out")
		}
		// Refused on both gateways, over HTTP and WebSocket, with signed_out.
		for _, gw := range []*testGW{gwA, gwB} {
			if code, f := httpCall(t, gw, phoneTok, "GET", "/v1/changes", ""); code != http.StatusUnauthorized || f.Error.Name != "signed_out" {
				t.Fatalf("HTTP with the signed-out token: %d %+v, want 401 signed_out", code, f)
			}
			if _, resp, err := dialQuery(t, gw, phoneTok, ""); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("WebSocket with the signed-out token: %v %v, want a 401", resp, err)
			} else if b, _ := io.ReadAll(resp.Body); !strings.Contains(string(b), `"signed_out"`) {
				t.Fatalf("refused handshake body %s, want signed_out", b)
			}
		}
		// The laptop is untouched.
		if code, _ := httpCall(t, gwB, p.token(alice, "laptop", time.Hour), "GET", "/v1/changes", ""); code != http.StatusOK {
			t.Fatalf("the laptop's call after the phone's sign-out: %d", code)
		}
		laptop.send(map[string]any{"op": "ping", "req_id": "pg"})
		laptop.expect("pong", func(f frame) bool { return f.Op == wire.OpPong && f.ReqID == "pg" })

		after := deviceList(t, laptop, "l2")
		if findDevice(after, "phone") != nil || findDevice(after, "laptop") == nil {
			t.Fatalf("devices after the sign-out = %+v, want the laptop only", after.Devices)
		}

		// A token issued after the sign-out (iat is in seconds) works, and
		// the phone is listed again.
		for time.Now().Unix() <= res.SignedOutAt {
			time.Sleep(50 * time.Millisecond)
		}
		dialOK(t, gwB, p.platformToken(alice, "phone", "ios"), "")
		// The new connection registers its presence in Redis after the
		// handshake: ask until it shows.
		for i := 0; ; i++ {
			again := deviceList(t, laptop, fmt.Sprintf("l3-%d", i))
			if d := findDevice(again, "phone"); d != nil && d.Online {
				break
			}
			if i == 100 {
				t.Fatalf("devices after signing in again = %+v, want the phone online", again.Devices)
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("a sign-out over HTTP (DELETE) closes the device's connection on the other gateway", func(t *testing.T) {
		bob := user("bob")
		tabTok := p.platformToken(bob, "tablet", "tablet")
		tab := dialOK(t, gwA, tabTok, "")
		code, f := httpCall(t, gwB, p.token(bob, "cli", time.Hour), "DELETE", "/v1/devices/tablet", "")
		if code != http.StatusOK || f.Op != wire.OpResult {
			t.Fatalf("DELETE /v1/devices/tablet: %d %s", code, f.raw)
		}
		waitClose(t, tab, closeSignedOut, "signed_out")
		if code, f := httpCall(t, gwB, tabTok, "POST", "/v1/devices", ""); code != http.StatusUnauthorized || f.Error.Name != "signed_out" {
			t.Fatalf("POST /v1/devices with the signed-out token: %d %+v", code, f)
		}
		// A device may sign itself out; it gets the answer before the close.
		me := dialOK(t, gwB, p.token(bob, "desk", time.Hour), "")
		me.send(map[string]any{"op": "sign_out", "req_id": "self", "device_id": "desk"})
		if r := me.result("self"); r.Op != wire.OpResult {
			t.Fatalf("signing itself out: %s", r.raw)
		}
		waitClose(t, me, closeSignedOut, "signed_out")
	})

	t.Run("last seen is the disconnect of an offline device", func(t *testing.T) {
		carol := user("carol")
		web := dialOK(t, gwB, p.token(carol, "browser", time.Hour), "platform=web")
		cli := dialOK(t, gwA, p.token(carol, "cli", time.Hour), "")
		time.Sleep(300 * time.Millisecond)
		closedAt := time.Now()
		_ = web.ws.Close(websocket.StatusNormalClosure, "")
		<-web.done
		var dv *wire.DeviceInfo
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if dv = findDevice(deviceList(t, cli, "l"), "browser"); dv != nil && !dv.Online {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("browser still listed online (or missing) 5s after its close: %+v", dv)
			}
		}
		seen := time.UnixMilli(dv.LastSeenMs)
		if seen.Before(closedAt.Add(-50*time.Millisecond)) || seen.After(time.Now()) || dv.Platform != "web" || dv.Connections != 0 {
			t.Fatalf("browser = %+v (last seen %v), want web, offline, last seen at its close (%v)", *dv, seen, closedAt)
		}
	})

	t.Run("login policy one_per_platform: the newest connection of a platform closes the older with 4003, on any gateway", func(t *testing.T) {
		over := map[string]string{"GATEWAY_LOGIN_POLICY": "one_per_platform"}
		gwC, gwD := p.gateway(over), p.gateway(over)
		dan := user("dan")
		phone1 := dialOK(t, gwC, p.platformToken(dan, "phone-1", "ios"), "")
		desk := dialOK(t, gwC, p.platformToken(dan, "mac", "desktop"), "")
		bare := dialOK(t, gwD, p.token(dan, "script", time.Hour), "") // no platform: the policy leaves it alone
		phone2 := dialOK(t, gwD, p.platformToken(dan, "phone-2", "ios"), "")
		waitClose(t, phone1, closeReplaced, "replaced")
		// A second connection of the same device on the same gateway: the
		// older closes, here without a signal.
		phone2b := dialOK(t, gwD, p.platformToken(dan, "phone-2", "ios"), "")
		waitClose(t, phone2, closeReplaced, "replaced")
		// The connect parameter counts as the platform too.
		desk2 := dialOK(t, gwD, p.token(dan, "imac", time.Hour), "platform=desktop")
		waitClose(t, desk, closeReplaced, "replaced")
		for _, c := range []*client{phone2b, bare, desk2} {
			c.send(map[string]any{"op": "ping", "req_id": "alive"})
			c.expect("pong", func(f frame) bool { return f.Op == wire.OpPong && f.ReqID == "alive" })
		}
		l := deviceList(t, bare, "l")
		for id, online := range map[string]bool{"phone-1": false, "phone-2": true, "mac": false, "imac": true, "script": true} {
			dv := findDevice(l, id)
			if dv == nil || dv.Online != online {
				t.Fatalf("device %s = %+v, want online=%v; list %+v", id, dv, online, l.Devices)
			}
		}
		if dv := findDevice(l, "phone-2"); dv.Connections != 1 {
			t.Fatalf("phone-2 has %d connections, want 1", dv.Connections)
		}
	})

	t.Run("the default policy keeps every connection", func(t *testing.T) {
		erin := user("erin")
		a := dialOK(t, gwA, p.platformToken(erin, "phone-1", "ios"), "")
		dialOK(t, gwB, p.platformToken(erin, "phone-2", "ios"), "")
		if _, ok := a.expectWithin(500*time.Millisecond, "nothing", func(frame) bool { return false }); ok || a.closeErr() != nil {
			t.Fatalf("the older connection closed under the default policy: %v", a.closeErr())
		}
	})

	t.Run("presence answers online, platforms and last seen for users sharing a session, and nothing of others", func(t *testing.T) {
		fay, gus, hal, mal := user("fay"), user("gus"), user("hal"), user("mal")
		f := dialOK(t, gwA, p.token(fay, "phone", time.Hour), "platform=android")
		sid, created := createGroup(f, gus, hal)
		p.waitStored(sid, created)
		gusC := dialOK(t, gwB, p.token(gus, "laptop", time.Hour), "platform=desktop")
		dialOK(t, gwA, p.token(gus, "phone", time.Hour), "platform=ios")
		halC := dialOK(t, gwB, p.token(hal, "phone", time.Hour), "platform=android")
		dialOK(t, gwB, p.token(mal, "phone", time.Hour), "platform=ios")
		time.Sleep(200 * time.Millisecond)
		closedAt := time.Now()
		_ = halC.ws.Close(websocket.StatusNormalClosure, "")
		<-halC.done

		var pr wire.PresenceResult
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			f.send(map[string]any{"op": "presence", "req_id": "pr", "user_ids": []string{gus, hal, mal, "nobody-x", fay}})
			mustDecode(t, f.result("pr").raw, &pr)
			if h := findPresence(pr, hal); h != nil && !h.Online || time.Now().After(deadline) {
				break
			}
		}
		if len(pr.Presence) != 3 || pr.Presence[0].UserID != gus || pr.Presence[1].UserID != hal || pr.Presence[2].UserID != fay {
			t.Fatalf("presence = %+v, want gus, hal, fay in the order asked", pr.Presence)
		}
		if g := pr.Presence[0]; !g.Online || !slices.Equal(g.Platforms, []string{"desktop", "ios"}) || time.Since(time.UnixMilli(g.LastSeenMs)) > 5*time.Second {
			t.Fatalf("gus = %+v, want online on desktop and ios, last seen now", g)
		}
		if h := pr.Presence[1]; h.Online || len(h.Platforms) != 0 || time.UnixMilli(h.LastSeenMs).Before(closedAt.Add(-50*time.Millisecond)) || time.UnixMilli(h.LastSeenMs).After(time.Now()) {
			t.Fatalf("hal = %+v, want offline, last seen at its close (%v)", h, closedAt)
		}
		if me := pr.Presence[2]; !me.Online || !slices.Equal(me.Platforms, []string{"android"}) {
			t.Fatalf("fay herself = %+v", me)
		}
		if !slices.Equal(pr.NotVisible, []string{mal, "nobody-x"}) {
			t.Fatalf("not_visible = %v, want mal (online, no shared session) and an unknown user alike", pr.NotVisible)
		}

		// Over HTTP, from gus on the other gateway.
		req, _ := http.NewRequest("GET", "http://"+gwB.addr+"/v1/presence?user_ids="+fay+","+mal, nil)
		req.Header.Set("Authorization", "Bearer "+p.token(gus, "cli", time.Hour))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var hp wire.PresenceResult
		mustDecode(t, b, &hp)
		if resp.StatusCode != http.StatusOK || len(hp.Presence) != 1 || hp.Presence[0].UserID != fay || !hp.Presence[0].Online || !slices.Equal(hp.NotVisible, []string{mal}) {
			t.Fatalf("GET /v1/presence: %d %s", resp.StatusCode, b)
		}
		_ = gusC
		if code, f := httpCall(t, gwB, p.token(gus, "cli", time.Hour), "POST", "/v1/presence", `{"user_ids":[]}`); code != http.StatusBadRequest || f.Error.Name != "missing_field" {
			t.Fatalf("presence of nobody: %d %+v", code, f)
		}
	})
}

func (p *pipeline) platformToken(user, device, platform string) string {
	p.t.Helper()
	tok, err := p.signer.MintPlatform(user, device, platform, time.Hour)
	if err != nil {
		p.t.Fatal(err)
	}
	return tok
}

func dialOK(t *testing.T, gw *testGW, token, query string) *client {
	t.Helper()
	c, _, err := dialQuery(t, gw, token, query)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c.name = "conn " + c.hello.ConnID
	return c
}

// waitClose waits for the gateway to close c with code and reason.
func waitClose(t *testing.T, c *client, code websocket.StatusCode, reason string) {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s still open 10s later, want a close with %d", c.name, code)
	}
	var ce websocket.CloseError
	err := c.closeErr()
	if got := websocket.CloseStatus(err); got != code {
		t.Fatalf("%s closed with %v (%v), want %d %s", c.name, got, err, code, reason)
	}
	if asCloseError(err, &ce); ce.Reason != reason {
		t.Fatalf("%s closed with reason %q, want %q", c.name, ce.Reason, reason)
	}
}

func asCloseError(err error, ce *websocket.CloseError) {
	for err != nil {
		if e, ok := err.(websocket.CloseError); ok {
			*ce = e
			return
		}
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return
		}
		err = u.Unwrap()
	}
}

func deviceList(t *testing.T, c *client, reqID string) wire.DevicesResult {
	t.Helper()
	c.send(map[string]any{"op": "devices", "req_id": reqID})
	r := c.result(reqID)
	if r.Op != wire.OpResult {
		t.Fatalf("devices: %s", r.raw)
	}
	var res wire.DevicesResult
	if err := json.Unmarshal(r.raw, &res); err != nil {
		t.Fatal(err)
	}
	return res
}

func findDevice(r wire.DevicesResult, id string) *wire.DeviceInfo {
	for i := range r.Devices {
		if r.Devices[i].DeviceID == id {
			return &r.Devices[i]
		}
	}
	return nil
}

func findPresence(r wire.PresenceResult, user string) *wire.UserPresence {
	for i := range r.Presence {
		if r.Presence[i].UserID == user {
			return &r.Presence[i]
		}
	}
	return nil
}
