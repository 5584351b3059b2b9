package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/seqflow/seqflow/internal/wire"
)

// TestSDK runs the SDK against the whole pipeline (sequencer, persister,
// pusher and producer-gw as processes on the local stack).
func TestSDK(t *testing.T) {
	p := newPipeline(t)
	gw := p.gateway(t, "gw-a")

	t.Run("kill -9 of the gateway mid-stream: every message once, in order, stored once", func(t *testing.T) {
		alice, bob := user("alice"), user("bob")
		a := p.start(t, alice, "phone", []string{gw.url}, nil)
		b := p.start(t, bob, "phone", []string{gw.url}, nil)
		ctx := ctxT(t, 2*time.Minute)
		g, err := a.CreateGroup(ctx, "kill", bob)
		if err != nil {
			t.Fatal(err)
		}
		const n = 300
		pend := make([]*Pending, 0, n)
		sent := map[string]int{} // client_msg_id → index
		for i := range n {
			pp, err := a.Post(ctx, g.SessionID, Text(fmt.Sprintf("m%03d", i)))
			if err != nil {
				t.Fatalf("post %d: %v", i, err)
			}
			pend = append(pend, pp)
			sent[pp.ClientMsgID] = i
			if i == n/3 {
				gw.proc.Kill() // with sends in flight
				time.Sleep(500 * time.Millisecond)
				if err := gw.proc.Restart(); err != nil {
					t.Error(err)
				}
			}
			time.Sleep(3 * time.Millisecond)
		}
		acks := map[int64]string{}
		for i, pp := range pend {
			ack, err := pp.Wait(ctx)
			if err != nil {
				t.Fatalf("message %d (%s): %v", i, pp.ClientMsgID, err)
			}
			if prev, dup := acks[ack.Seq]; dup {
				t.Fatalf("seq %d acked for %s and %s", ack.Seq, prev, pp.ClientMsgID)
			}
			acks[ack.Seq] = pp.ClientMsgID
		}
		if a.Stats().Resent == 0 {
			t.Fatalf("no command was resent: the kill did not hit messages in flight (stats %+v)", a.Stats())
		}
		for _, c := range []*running{a, b} {
			evs := c.rec.waitFor(t, time.Minute, "all messages", func(evs []Event) bool { return countMessages(evs, g.SessionID) >= n })
			checkOnceInOrder(t, evs, g.SessionID, sent)
			if c.Stats().Connects < 2 {
				t.Fatalf("client did not reconnect: %+v", c.Stats())
			}
		}
		// The store lags the push path by the persister's batch time.
		var stored map[string]int
		for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			stored = storedMessages(t, p, g.SessionID)
			if len(stored) >= n || time.Now().After(deadline) {
				break
			}
		}
		if len(stored) != n {
			t.Fatalf("store holds %d distinct messages, want %d", len(stored), n)
		}
		for id, k := range stored {
			if _, ok := sent[id]; !ok || k != 1 {
				t.Fatalf("stored %s %d times (sent by us: %v)", id, k, ok)
			}
		}
		t.Logf("alice %+v; bob %+v", a.Stats(), b.Stats())
	})

	t.Run("outbox: unacknowledged messages survive a client restart with their IDs", func(t *testing.T) {
		alice := user("alice")
		path := filepath.Join(t.TempDir(), "outbox.jsonl")
		a := p.start(t, alice, "phone", []string{gw.url}, nil)
		ctx := ctxT(t, time.Minute)
		g, err := a.CreateGroup(ctx, "outbox")
		if err != nil {
			t.Fatal(err)
		}
		first, err := a.Send(ctx, g.SessionID, Text("already sent"))
		if err != nil {
			t.Fatal(err)
		}
		// A client that never connects (its gateway is down) posts three
		// messages, then "crashes".
		dead, err := New(Options{URLs: []string{"ws://" + freeAddr(t)}, Token: p.token(alice, "phone"), OutboxPath: path})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for i := range 3 {
			pp, err := dead.Post(ctx, g.SessionID, Text(fmt.Sprintf("offline %d", i)))
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, pp.ClientMsgID)
		}
		dctx, dcancel := context.WithTimeout(ctx, 300*time.Millisecond)
		_ = dead.Run(dctx)
		dcancel()
		// And the first message's ACK was lost before the outbox recorded it.
		ob, _, err := openOutbox(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := ob.add(&wire.ClientFrame{Op: wire.OpSend, ClientMsgID: first.ClientMsgID, SessionID: g.SessionID, Type: "text", Body: json.RawMessage(`"already sent"`)}); err != nil {
			t.Fatal(err)
		}
		_ = ob.close()

		r := p.start(t, alice, "phone", []string{gw.url}, func(o *Options) { o.OutboxPath = path })
		rec := r.Recovered()
		if len(rec) != 4 {
			t.Fatalf("recovered %d commands, want 4", len(rec))
		}
		for i, pp := range rec {
			want := first.ClientMsgID
			if i < 3 {
				want = ids[i]
			}
			if pp.ClientMsgID != want {
				t.Fatalf("recovered[%d] = %s, want %s", i, pp.ClientMsgID, want)
			}
			ack, err := pp.Wait(ctx)
			if err != nil {
				t.Fatalf("recovered %s: %v", pp.ClientMsgID, err)
			}
			if i == 3 && (!ack.Duplicate || ack.Seq != first.Seq || ack.MsgID != first.MsgID) {
				t.Fatalf("resent sent message: ack %+v, want the duplicate of %+v", ack, first)
			}
		}
		_ = r.stop()
		if _, left, err := openOutbox(path); err != nil || len(left) != 0 {
			t.Fatalf("outbox after the ACKs: %d left, err %v", len(left), err)
		}
		var n int
		if err := p.pool.QueryRow(ctx, `SELECT count(*) FROM messages WHERE session_id = $1 AND kind = 'message'`, g.SessionID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); n != 4 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			_ = p.pool.QueryRow(ctx, `SELECT count(*) FROM messages WHERE session_id = $1 AND kind = 'message'`, g.SessionID).Scan(&n)
		}
		if n != 4 {
			t.Fatalf("store holds %d messages, want 4 (each once)", n)
		}
	})

	t.Run("an accepted ACK is completed by the seq notice, without a second send", func(t *testing.T) {
		impatient := p.gateway(t, "gw-impatient", "GATEWAY_ACK_WAIT=0s")
		a := p.start(t, user("alice"), "phone", []string{impatient.url}, func(o *Options) { o.AckTimeout, o.AcceptedTimeout = time.Minute, time.Minute })
		ctx := ctxT(t, 30*time.Second)
		g, err := a.CreateGroup(ctx, "notice")
		if err != nil {
			t.Fatal(err)
		}
		ack, err := a.Send(ctx, g.SessionID, Text("via notice"))
		if err != nil || ack.Seq <= g.Seq || ack.MsgID == "" || ack.Duplicate {
			t.Fatalf("send = %+v, %v; want a fresh seq after %d", ack, err, g.Seq)
		}
		if st := a.Stats(); st.Accepted != 2 || st.Resent != 0 {
			t.Fatalf("stats %+v: want both commands accepted first and none resent (the notices answer them)", st)
		}
	})

	t.Run("history pages backward and around a message", func(t *testing.T) {
		a := p.start(t, user("alice"), "phone", []string{gw.url}, nil)
		ctx := ctxT(t, 30*time.Second)
		g, err := a.CreateGroup(ctx, "history")
		if err != nil {
			t.Fatal(err)
		}
		want := []int64{g.Seq} // every seq of the session, ascending
		for i := range 7 {
			ack, err := a.Send(ctx, g.SessionID, Text(fmt.Sprintf("h%d", i)))
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, ack.Seq)
		}
		last := want[len(want)-1]
		for { // the store trails the log by the persister's batch
			evs, _, err := a.SyncBefore(ctx, g.SessionID, last+1, 1)
			if err != nil {
				t.Fatal(err)
			}
			if len(evs) == 1 && evs[0].Seq == last {
				break
			}
			if ctx.Err() != nil {
				t.Fatal("the last message never reached the store")
			}
			time.Sleep(50 * time.Millisecond)
		}
		var back []int64
		for before := last + 1; ; {
			evs, more, err := a.SyncBefore(ctx, g.SessionID, before, 3)
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range evs {
				back = append(back, e.Seq)
			}
			if !more {
				break
			}
			before = evs[len(evs)-1].Seq
		}
		slices.Reverse(back)
		if !slices.Equal(back, want) {
			t.Fatalf("backward pages, reversed: %v, want %v", back, want)
		}
		evs, moreBefore, moreAfter, err := a.SyncAround(ctx, g.SessionID, want[4], 3)
		if err != nil {
			t.Fatal(err)
		}
		var around []int64
		for _, e := range evs {
			around = append(around, e.Seq)
		}
		if !slices.Equal(around, want[3:6]) || !moreBefore || !moreAfter {
			t.Fatalf("around %d: %v (more before %v, after %v), want %v with more on both sides", want[4], around, moreBefore, moreAfter, want[3:6])
		}
	})

	t.Run("typing indicators reach the other members, not the sender", func(t *testing.T) {
		alice, bob := user("alice"), user("bob")
		got := make(chan Typing, 4)
		a := p.start(t, alice, "phone", []string{gw.url}, func(o *Options) { o.OnTyping = func(ty Typing) { got <- ty } })
		b := p.start(t, bob, "phone", []string{gw.url}, func(o *Options) { o.OnTyping = func(ty Typing) { got <- ty } })
		ctx := ctxT(t, 30*time.Second)
		g, err := a.CreateGroup(ctx, "typing", bob)
		if err != nil {
			t.Fatal(err)
		}
		// The gateway lists members from the store, which trails the log:
		// wait until sync finds the create there.
		for {
			if evs, _, err := b.Sync(ctx, g.SessionID, 0, 1); err == nil && len(evs) == 1 {
				break
			}
			if ctx.Err() != nil {
				t.Fatal("bob never became a member in the store")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := a.SetTyping(ctx, g.SessionID, true); err != nil {
			t.Fatal(err)
		}
		select {
		case ty := <-got:
			if ty.SessionID != g.SessionID || ty.UserID != alice || !ty.Active || ty.ExpiresIn <= 0 {
				t.Fatalf("bob got %+v, want alice typing in %s with an expiry", ty, g.SessionID)
			}
		case <-ctx.Done():
			t.Fatal("no typing indicator reached bob")
		}
		var se *ServerError
		if err := b.SetTyping(ctx, "g-nobody-has-this-session", true); !errors.As(err, &se) || se.Name != "not_a_member" {
			t.Fatalf("typing in a foreign session: %v, want not_a_member", err)
		}
	})

	t.Run("read cursors reach the other members, seen_by lists the readers", func(t *testing.T) {
		alice, bob := user("alice"), user("bob")
		seen := make(chan Receipt, 4)
		a := p.start(t, alice, "phone", []string{gw.url}, func(o *Options) {
			o.OnReceipt = func(r Receipt) {
				if r.Kind == "read" {
					seen <- r
				}
			}
		})
		b := p.start(t, bob, "phone", []string{gw.url}, nil)
		ctx := ctxT(t, 30*time.Second)
		g, err := a.CreateGroup(ctx, "seen", bob)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := a.Send(ctx, g.SessionID, Text("read me"))
		if err != nil {
			t.Fatal(err)
		}
		for { // the read receipt needs bob's membership in the store
			if err := b.MarkRead(ctx, g.SessionID, ack.Seq); err == nil {
				break
			} else if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		select {
		case s := <-seen:
			if s.SessionID != g.SessionID || s.UserID != bob || s.Seq != ack.Seq {
				t.Fatalf("alice saw %+v, want bob at %d", s, ack.Seq)
			}
		case <-ctx.Done():
			t.Fatal("bob's read cursor never reached alice")
		}
		for {
			users, count, members, err := a.SeenBy(ctx, g.SessionID, ack.Seq)
			if err == nil && slices.Equal(users, []string{bob}) && count == 1 && members == 2 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("seen_by = %v %d of %d, %v; want bob", users, count, members, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("read receipts off: the reader's cursor moves, the others see no read and seen_by leaves them out", func(t *testing.T) {
		alice, bob := user("alice"), user("bob")
		seen := make(chan Receipt, 4)
		a := p.start(t, alice, "phone", []string{gw.url}, func(o *Options) {
			o.OnReceipt = func(r Receipt) {
				if r.Kind == "read" {
					seen <- r
				}
			}
		})
		b := p.start(t, bob, "phone", []string{gw.url}, nil)
		ctx := ctxT(t, 30*time.Second)
		if err := b.SetReadReceipts(ctx, false); err != nil {
			t.Fatal(err)
		}
		if on, err := b.ReadReceipts(ctx); err != nil || on {
			t.Fatalf("ReadReceipts = %v, %v; want off", on, err)
		}
		g, err := a.CreateGroup(ctx, "private", bob)
		if err != nil {
			t.Fatal(err)
		}
		ack, err := a.Send(ctx, g.SessionID, Text("read me quietly"))
		if err != nil {
			t.Fatal(err)
		}
		for {
			if err := b.MarkRead(ctx, g.SessionID, ack.Seq); err == nil {
				break
			} else if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		for { // bob's own cursor moves
			ss, err := b.Changes(ctx)
			if err == nil && len(ss) == 1 && ss[0].ReadSeq == ack.Seq && ss[0].Unread == 0 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("bob's changes = %+v, %v; want read_seq %d", ss, err, ack.Seq)
			}
			time.Sleep(50 * time.Millisecond)
		}
		select {
		case s := <-seen:
			t.Fatalf("alice saw bob's read %+v; he turned read receipts off", s)
		case <-time.After(1200 * time.Millisecond):
		}
		if users, count, members, err := a.SeenBy(ctx, g.SessionID, ack.Seq); err != nil || len(users) != 0 || count != 0 || members != 2 {
			t.Fatalf("seen_by = %v %d of %d, %v; want nobody of 2", users, count, members, err)
		}
	})

	t.Run("group governance: roles, a mute refused with its code, member list and member sync", func(t *testing.T) {
		alice, bob, carol := user("alice"), user("bob"), user("carol")
		a := p.start(t, alice, "phone", []string{gw.url}, nil)
		b := p.start(t, bob, "phone", []string{gw.url}, nil)
		c := p.start(t, carol, "phone", []string{gw.url}, nil)
		ctx := ctxT(t, 30*time.Second)
		g, err := a.CreateGroup(ctx, "gov", bob, carol)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := a.SetRole(ctx, g.SessionID, bob, wire.RoleAdmin); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Mute(ctx, g.SessionID, carol, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		_, err = c.Send(ctx, g.SessionID, Text("let me speak"))
		var se *ServerError
		if !errors.As(err, &se) || se.Name != "muted" || se.Retryable {
			t.Fatalf("a muted member's send: %v, want muted", err)
		}
		if _, err := b.Dissolve(ctx, g.SessionID); !errors.As(err, &se) || se.Name != "not_permitted" {
			t.Fatalf("an admin's dissolve: %v, want not_permitted", err)
		}
		last, err := a.Mute(ctx, g.SessionID, carol, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Send(ctx, g.SessionID, Text("thanks")); err != nil {
			t.Fatalf("send after the mute was lifted: %v", err)
		}
		var members []wire.MemberInfo
		var version int64
		for { // the store lags the log by the persister's batch time
			members, _, version, err = a.MemberList(ctx, g.SessionID, "", 10)
			if err == nil && version >= last.Seq {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("member list never reached version %d: %v (%d)", last.Seq, err, version)
			}
			time.Sleep(50 * time.Millisecond)
		}
		roles := map[string]string{}
		for _, m := range members {
			roles[m.UserID] = m.Role
		}
		if len(roles) != 3 || roles[alice] != "owner" || roles[bob] != "admin" || roles[carol] != "member" {
			t.Fatalf("member list %v", roles)
		}
		changes, v, more, err := b.MemberChanges(ctx, g.SessionID, 0, 100)
		if err != nil || more || v != version {
			t.Fatalf("member_changes: version %d more %v err %v, want %d", v, more, err, version)
		}
		got := map[string]string{}
		for _, ch := range changes {
			if ch.Member {
				got[ch.UserID] = ch.Role
			}
			if ch.UserID == carol && (ch.MutedUntilMs == nil || *ch.MutedUntilMs != 0) {
				t.Errorf("carol's change %+v: want unmuted", ch)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(roles) {
			t.Fatalf("member_changes from 0 give %v, the list %v", got, roles)
		}
	})

	t.Run("errors carry the server's code, name and retryability", func(t *testing.T) {
		a := p.start(t, user("alice"), "phone", []string{gw.url}, nil)
		ctx := ctxT(t, 30*time.Second)
		// Never created: the sequencer refuses it in log order.
		_, err := a.Send(ctx, "g-nobody-has-this-session", Text("hi"))
		var se *ServerError
		if !errors.As(err, &se) || se.Code != 4004 || se.Name != "session_not_found" || se.Retryable || IsRetryable(err) {
			t.Fatalf("send to a session never created: %v, want session_not_found 4004, not retryable", err)
		}
	})

	t.Run("a refused token stops Run with a handshake error", func(t *testing.T) {
		c, err := New(Options{URLs: []string{gw.url}, Token: "not-a-token"})
		if err != nil {
			t.Fatal(err)
		}
		err = c.Run(ctxT(t, 20*time.Second))
		var he *HandshakeError
		if !errors.As(err, &he) || he.Status != 401 || !IsAuth(err) || he.Err == nil || he.Err.Name != "unauthenticated" {
			t.Fatalf("Run = %v, want a 401 unauthenticated handshake error", err)
		}
	})

	t.Run("devices: list, presence, a sign-out ends Run with ErrSignedOut, the login policy with ErrReplaced", func(t *testing.T) {
		alice, bob, stranger := user("alice"), user("bob"), user("stranger")
		ctx := ctxT(t, time.Minute)
		// runs starts a client whose Run is expected to end by itself.
		runs := func(opts Options) <-chan error {
			c, err := New(opts)
			if err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithCancel(context.Background())
			errc := make(chan error, 1)
			go func() { errc <- c.Run(rctx) }()
			t.Cleanup(cancel)
			return errc
		}
		ended := func(errc <-chan error, what string) error {
			t.Helper()
			select {
			case err := <-errc:
				return err
			case <-time.After(15 * time.Second):
				t.Fatalf("%s: Run still running 15s later", what)
				return nil
			}
		}
		phoneTok := p.token(alice, "phone")
		connected := make(chan struct{}, 1)
		phone := runs(Options{URLs: []string{gw.url}, Token: phoneTok, Platform: "ios", MinBackoff: 50 * time.Millisecond,
			OnConnect: func(Hello) { connected <- struct{}{} }})
		<-connected
		laptop := p.start(t, alice, "laptop", []string{gw.url}, func(o *Options) { o.Platform = "desktop" })
		b := p.start(t, bob, "phone", []string{gw.url}, func(o *Options) { o.Platform = "android" })
		g, err := b.CreateGroup(ctx, "devices", alice)
		if err != nil {
			t.Fatal(err)
		}
		_ = g
		p.start(t, stranger, "phone", []string{gw.url}, nil)

		devs, err := laptop.Devices(ctx)
		if err != nil {
			t.Fatal(err)
		}
		byID := map[string]Device{}
		for _, d := range devs {
			byID[d.DeviceID] = d
		}
		if ph, lp := byID["phone"], byID["laptop"]; len(devs) != 2 || ph.Platform != "ios" || !ph.Online || ph.Current ||
			lp.Platform != "desktop" || !lp.Online || !lp.Current || time.Since(lp.LastSeen) > 5*time.Second {
			t.Fatalf("Devices = %+v, want phone (ios, online) and laptop (desktop, online, current)", devs)
		}

		var pres []UserPresence
		var hidden []string
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			// The group reaches the store a moment after its ACK.
			if pres, hidden, err = laptop.Presence(ctx, bob, stranger); err != nil {
				t.Fatal(err)
			}
			if len(pres) == 1 || time.Now().After(deadline) {
				break
			}
		}
		if len(pres) != 1 || pres[0].UserID != bob || !pres[0].Online || len(pres[0].Platforms) != 1 || pres[0].Platforms[0] != "android" ||
			len(hidden) != 1 || hidden[0] != stranger {
			t.Fatalf("Presence = %+v, not visible %v; want bob online on android, the stranger not visible", pres, hidden)
		}

		at, err := laptop.SignOutDevice(ctx, "phone")
		if err != nil || time.Since(at) > time.Minute {
			t.Fatalf("SignOutDevice = %v, %v", at, err)
		}
		if err := ended(phone, "signed-out phone"); !errors.Is(err, ErrSignedOut) || !IsSignedOut(err) {
			t.Fatalf("the signed-out phone's Run = %v, want ErrSignedOut", err)
		}
		err = ended(runs(Options{URLs: []string{gw.url}, Token: phoneTok}), "old phone token")
		var he *HandshakeError
		if !errors.As(err, &he) || he.Status != 401 || !IsSignedOut(err) || !IsAuth(err) {
			t.Fatalf("Run with the signed-out token = %v, want a 401 signed_out handshake error", err)
		}
		if devs, err = laptop.Devices(ctx); err != nil || len(devs) != 1 || devs[0].DeviceID != "laptop" {
			t.Fatalf("Devices after the sign-out = %+v, %v; want the laptop only", devs, err)
		}

		// The login policy: a newer ios connection of alice replaces the older.
		pgw := p.gateway(t, "gw-policy", "GATEWAY_LOGIN_POLICY=one_per_platform")
		old := make(chan struct{}, 1)
		first := runs(Options{URLs: []string{pgw.url}, Token: p.token(alice, "ipad"), Platform: "ios", MinBackoff: 50 * time.Millisecond,
			OnConnect: func(Hello) { old <- struct{}{} }})
		<-old
		p.start(t, alice, "iphone", []string{pgw.url}, func(o *Options) { o.Platform = "ios" })
		if err := ended(first, "replaced ipad"); !errors.Is(err, ErrReplaced) {
			t.Fatalf("the replaced connection's Run = %v, want ErrReplaced", err)
		}
	})

	t.Run("a restarted client resumes after its cursors, and the next gateway URL is tried", func(t *testing.T) {
		alice, bob := user("alice"), user("bob")
		a := p.start(t, alice, "phone", []string{gw.url}, nil)
		ctx := ctxT(t, time.Minute)
		g, err := a.CreateGroup(ctx, "resume", bob)
		if err != nil {
			t.Fatal(err)
		}
		b1 := p.start(t, bob, "tablet", []string{gw.url}, nil)
		sent := map[string]int{}
		for i := range 5 {
			ack, err := a.Send(ctx, g.SessionID, Text(fmt.Sprintf("before %d", i)))
			if err != nil {
				t.Fatal(err)
			}
			sent[ack.ClientMsgID] = i
		}
		b1.rec.waitFor(t, 30*time.Second, "5 messages", func(evs []Event) bool { return countMessages(evs, g.SessionID) == 5 })
		if err := b1.stop(); err != nil {
			t.Fatal(err)
		}
		cursors := b1.Cursors()
		later := map[string]int{}
		for i := range 5 {
			ack, err := a.Send(ctx, g.SessionID, Text(fmt.Sprintf("after %d", i)))
			if err != nil {
				t.Fatal(err)
			}
			later[ack.ClientMsgID] = i
		}
		waitQuery(t, p, "the later messages stored", func() bool { return len(storedMessages(t, p, g.SessionID)) == 10 })
		down := "ws://" + freeAddr(t)
		b2 := p.start(t, bob, "tablet", []string{down, gw.url}, func(o *Options) { o.Cursors = cursors })
		evs := b2.rec.waitFor(t, 30*time.Second, "5 later messages", func(evs []Event) bool { return countMessages(evs, g.SessionID) >= 5 })
		time.Sleep(300 * time.Millisecond) // room for a wrong extra event to show up
		evs = b2.rec.snapshot()
		checkOnceInOrder(t, evs, g.SessionID, later)
		if countMessages(evs, g.SessionID) != 5 || evs[0].Seq <= cursors[g.SessionID] {
			t.Fatalf("resumed client got %d messages starting at seq %d, want the 5 after seq %d", countMessages(evs, g.SessionID), evs[0].Seq, cursors[g.SessionID])
		}
	})

	t.Run("delivered receipts move the device cursor, read receipts the read cursor", func(t *testing.T) {
		alice, bob := user("alice"), user("bob")
		a := p.start(t, alice, "phone", []string{gw.url}, nil)
		b := p.start(t, bob, "phone", []string{gw.url}, nil)
		ctx := ctxT(t, time.Minute)
		g, err := a.CreateGroup(ctx, "receipts", bob)
		if err != nil {
			t.Fatal(err)
		}
		var last Ack
		for i := range 3 {
			if last, err = a.Send(ctx, g.SessionID, Text(fmt.Sprintf("r%d", i))); err != nil {
				t.Fatal(err)
			}
		}
		b.rec.waitFor(t, 30*time.Second, "3 messages", func(evs []Event) bool { return countMessages(evs, g.SessionID) == 3 })
		waitQuery(t, p, fmt.Sprintf("delivered cursor at %d", last.Seq), func() bool {
			var seq int64
			_ = p.pool.QueryRow(ctx, `SELECT delivered_seq FROM delivery_cursors WHERE session_id = $1 AND user_id = $2 AND device_id = 'phone'`, g.SessionID, bob).Scan(&seq)
			return seq == last.Seq
		})
		if err := b.MarkRead(ctx, g.SessionID, last.Seq); err != nil {
			t.Fatal(err)
		}
		waitQuery(t, p, fmt.Sprintf("read_seq at %d", last.Seq), func() bool {
			ch, err := b.Changes(ctx)
			return err == nil && len(ch) == 1 && ch[0].ReadSeq == last.Seq
		})
	})
}

// storedMessages counts the stored chat messages of session by client_msg_id.
func storedMessages(t *testing.T, p *pipeline, session string) map[string]int {
	t.Helper()
	rows, err := p.pool.Query(context.Background(), `SELECT client_msg_id, count(*) FROM messages WHERE session_id = $1 AND kind = 'message' GROUP BY client_msg_id`, session)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	stored := map[string]int{}
	for rows.Next() {
		var id string
		var k int
		if err := rows.Scan(&id, &k); err != nil {
			t.Fatal(err)
		}
		stored[id] = k
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	return stored
}

func waitQuery(t *testing.T, p *pipeline, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 20s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func countMessages(evs []Event, session string) int {
	n := 0
	for _, e := range evs {
		if e.SessionID == session && e.Kind == wire.KindMessage {
			n++
		}
	}
	return n
}

// checkOnceInOrder: seqs of session strictly increase, every message of
// want arrives exactly once, and nothing else does.
func checkOnceInOrder(t *testing.T, evs []Event, session string, want map[string]int) {
	t.Helper()
	var last int64
	seen := map[string]bool{}
	for _, e := range evs {
		if e.SessionID != session {
			continue
		}
		if e.Seq <= last {
			t.Fatalf("seq %d after %d: out of order or repeated", e.Seq, last)
		}
		last = e.Seq
		if e.Kind != wire.KindMessage {
			continue
		}
		if _, ok := want[e.ClientMsgID]; !ok {
			t.Fatalf("unexpected message %s at seq %d", e.ClientMsgID, e.Seq)
		}
		if seen[e.ClientMsgID] {
			t.Fatalf("message %s delivered twice", e.ClientMsgID)
		}
		seen[e.ClientMsgID] = true
	}
	if len(seen) != len(want) {
		t.Fatalf("got %d of %d messages", len(seen), len(want))
	}
}
