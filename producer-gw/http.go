package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/seqflow/seqflow/internal/apierr"
	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// routes is the client API: the WebSocket endpoint and, for every frame,
// an HTTP call taking the same JSON (docs/protocol.md).
func (a *api) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/ws", a.serveWS)
	mux.HandleFunc("POST /v1/{op}", a.serveOp)
	mux.HandleFunc("GET /v1/sessions/{session_id}/messages", a.serveSyncGet)
	mux.HandleFunc("GET /v1/changes", a.serveChangesGet)
	mux.HandleFunc("GET /v1/devices", a.serveDevicesGet)
	mux.HandleFunc("DELETE /v1/devices/{device_id}", a.serveSignOutDelete)
	mux.HandleFunc("GET /v1/presence", a.servePresenceGet)
	if a.cfg.DevMode {
		mux.HandleFunc("POST /v1/dev/login", a.serveDevLogin)
	}
	if a.cfg.Web {
		mountWeb(mux)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		b := apierr.Newf(imv1.ErrorCode_ERROR_CODE_UNKNOWN_TYPE, "no route %s %s", r.Method, r.URL.Path).Body()
		writeJSON(w, http.StatusNotFound, wire.ErrorFrame{Op: wire.OpError,
			Error: wire.ErrorBody{Code: b.Code, Name: b.Name, Message: b.Message, Retryable: b.Retryable}})
	})
	return mux
}

// principal authenticates an HTTP call, answering 401 itself on failure
// (a signed-out device's token included), and records the device as seen.
func (a *api) principal(w http.ResponseWriter, r *http.Request) (auth.Principal, bool) {
	p, err := a.verifier.Verify(auth.BearerToken(r))
	if err != nil {
		a.httpError(w, "", apierr.New(auth.Code(err), err.Error()))
		return p, false
	}
	if aerr := a.devices.signedOut(r.Context(), p); aerr != nil {
		a.httpError(w, "", aerr)
		return p, false
	}
	if a.conns != nil {
		if aerr := a.conns.admitUser(r.Context(), p.UserID); aerr != nil {
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Connection", "close") // see writeRefusal
			a.httpError(w, "", aerr)
			return p, false
		}
	}
	a.devices.httpSeen(r.Context(), p)
	return p, true
}

// knownMembers says whether a membership answer is at hand without asking
// the store (membership.known).
type knownMembers interface {
	known(session, user string) bool
}

// cost is what f takes from its user's request rate: one, and for a
// delivered frame one more per session of its cursors whose receipt would
// cost the store a membership query: one the gateway holds no answer for
// and, on a WebSocket, has pushed nothing of (pushed, nil over HTTP). A
// client acknowledging what it received pays one per frame; one naming
// sessions at random pays one per session. At most a burst (the user's,
// and the device's when it has a limit): a frame never costs more than a
// full bucket.
func (a *api) cost(p auth.Principal, f *wire.ClientFrame, pushed func(session string) bool) int {
	if f.Op != wire.OpDelivered || a.members == nil {
		return 1
	}
	n := 1
	seen := make(map[string]struct{}, len(f.Cursors))
	for _, c := range f.Cursors {
		if _, dup := seen[c.SessionID]; dup {
			continue
		}
		seen[c.SessionID] = struct{}{}
		if (pushed == nil || !pushed(c.SessionID)) && !a.members.known(c.SessionID, p.UserID) {
			n++
		}
	}
	if a.cfg.RatePerDevice > 0 {
		n = min(n, a.cfg.RateDeviceBurst)
	}
	return min(n, a.cfg.RateBurst)
}

func (a *api) serveOp(w http.ResponseWriter, r *http.Request) {
	op := r.PathValue("op")
	switch op {
	case wire.OpSend, wire.OpEdit, wire.OpRecall, wire.OpCreateSession, wire.OpMembers, wire.OpGroup,
		wire.OpSync, wire.OpChanges, wire.OpRead, wire.OpDelivered, wire.OpTyping, wire.OpSeenBy, wire.OpMemberList, wire.OpMemberChanges,
		wire.OpDevices, wire.OpSignOut, wire.OpPresence, wire.OpSettings:
	default:
		a.httpError(w, "", apierr.Newf(imv1.ErrorCode_ERROR_CODE_UNKNOWN_TYPE, "unknown op %q", op))
		return
	}
	max := a.cfg.Limits.MaxFrameBytes
	if r.ContentLength > int64(max) {
		// Refused before a byte of it is read; the rest is not read either.
		w.Header().Set("Connection", "close")
		a.httpError(w, "", apierr.Newf(imv1.ErrorCode_ERROR_CODE_FRAME_TOO_LARGE, "body of %d bytes is over %d bytes", r.ContentLength, max))
		return
	}
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	a.m.frames.WithLabelValues(op, "http").Inc()
	// MaxBytesReader stops reading at the cap and has net/http close the
	// connection after the answer; GATEWAY_HTTP_READ_TIMEOUT (the
	// server's ReadTimeout) cuts off a body that trickles in.
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(max)))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		a.httpError(w, "", apierr.Newf(imv1.ErrorCode_ERROR_CODE_FRAME_TOO_LARGE, "body over %d bytes", max))
		return
	case errors.Is(err, os.ErrDeadlineExceeded):
		w.Header().Set("Connection", "close")
		a.httpError(w, "", apierr.Newf(imv1.ErrorCode_ERROR_CODE_TIMEOUT, "body not received within %s (GATEWAY_HTTP_READ_TIMEOUT)", a.cfg.HTTPReadTimeout))
		return
	case err != nil:
		w.Header().Set("Connection", "close")
		a.httpError(w, "", apierr.New(imv1.ErrorCode_ERROR_CODE_BAD_FRAME, "read body: "+err.Error()))
		return
	}
	f, aerr := wire.DecodeAs(body, op, a.cfg.Limits)
	if aerr != nil {
		cmid := ""
		if f != nil {
			cmid = f.ClientMsgID
		}
		a.httpError(w, cmid, aerr)
		return
	}
	a.serveFrame(w, r, p, f)
}

func (a *api) serveFrame(w http.ResponseWriter, r *http.Request, p auth.Principal, f *wire.ClientFrame) {
	// Every op is charged, delivered and typing included (cost).
	if !a.limits.allowN(r.Context(), p, a.cost(p, f, nil)) {
		w.Header().Set("Retry-After", "1")
		a.httpError(w, f.ClientMsgID, apierr.New(imv1.ErrorCode_ERROR_CODE_RATE_LIMITED, ""))
		return
	}
	if f.Op == wire.OpDelivered {
		// HTTP has no connection to batch on: one receipt per session now.
		b := a.receipts.batch(p)
		b.add(f.Cursors)
		b.stop()
		writeJSON(w, http.StatusOK, wire.OK{Op: wire.OpResult, ReqID: f.ReqID})
		return
	}
	if f.Op == wire.OpTyping {
		ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
		defer cancel()
		if aerr := a.signals.post(ctx, p, f); aerr != nil {
			a.httpError(w, "", aerr)
			return
		}
		writeJSON(w, http.StatusOK, wire.OK{Op: wire.OpResult, ReqID: f.ReqID})
		return
	}
	if f.Op == wire.OpSignOut {
		ctx, cancel := context.WithTimeout(r.Context(), storeTimeout)
		res, sig, aerr := a.devices.signOut(ctx, p, f)
		cancel()
		if aerr != nil {
			a.httpError(w, "", aerr)
			return
		}
		writeJSON(w, http.StatusOK, res)
		a.devices.announceSignOut(sig)
		return
	}
	if !isCommand(f.Op) {
		res, aerr := a.query(r.Context(), p, f)
		if aerr == errSyncBusy {
			w.Header().Set("Retry-After", "1")
		}
		if aerr != nil {
			a.httpError(w, "", aerr)
			return
		}
		writeJSON(w, http.StatusOK, res)
		return
	}
	if !a.up.begin() {
		a.httpError(w, f.ClientMsgID, ErrShuttingDown)
		return
	}
	defer a.up.done()
	up, aerr := a.up.prepare(r.Context(), p, f)
	if aerr != nil {
		a.httpError(w, f.ClientMsgID, aerr)
		return
	}
	// The pusher sends the seq only to live connections of the sender: an
	// HTTP call is one for as long as it waits.
	pc := presence.Conn{UserID: p.UserID, DeviceID: p.DeviceID, ConnID: "h-" + uuid.Must(uuid.NewV7()).String(), GatewayID: a.cfg.GatewayID}
	if a.cfg.AckWait > 0 {
		pctx, cancel := context.WithTimeout(r.Context(), a.cfg.AckWait)
		if err := a.presence.Put(pctx, pc); err != nil {
			a.m.presenceErrs.Inc()
		}
		cancel()
		defer func() {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Second)
			_ = a.presence.Remove(rctx, pc)
			cancel()
		}()
	}
	pend, produced := a.up.submit(up, f.Traceparent)
	ack, aerr := a.up.await(pend, produced, f, nil)
	if aerr != nil {
		a.httpError(w, f.ClientMsgID, aerr)
		return
	}
	status := http.StatusOK
	if ack.Status == wire.StatusAccepted {
		status = http.StatusAccepted
	}
	writeJSON(w, status, ack)
}

func (a *api) serveSyncGet(w http.ResponseWriter, r *http.Request) {
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	a.m.frames.WithLabelValues(wire.OpSync, "http").Inc()
	f := &wire.ClientFrame{Op: wire.OpSync, SessionID: r.PathValue("session_id")}
	q := r.URL.Query()
	for _, param := range []struct {
		name string
		dst  *int64
	}{{"after_seq", &f.AfterSeq}, {"before_seq", &f.BeforeSeq}, {"around_seq", &f.AroundSeq}, {"limit", nil}} {
		v := q.Get(param.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			a.httpError(w, "", apierr.Newf(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, "%s must be an integer", param.name))
			return
		}
		if param.dst != nil {
			*param.dst = n
		} else {
			f.Limit = int(n) // Validate checks the range, as for a sync frame
		}
	}
	if aerr := f.Validate(a.cfg.Limits); aerr != nil {
		a.httpError(w, "", aerr)
		return
	}
	a.serveFrame(w, r, p, f)
}

func (a *api) serveChangesGet(w http.ResponseWriter, r *http.Request) {
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	a.m.frames.WithLabelValues(wire.OpChanges, "http").Inc()
	a.serveFrame(w, r, p, &wire.ClientFrame{Op: wire.OpChanges})
}

func (a *api) serveDevicesGet(w http.ResponseWriter, r *http.Request) {
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	a.m.frames.WithLabelValues(wire.OpDevices, "http").Inc()
	a.serveFrame(w, r, p, &wire.ClientFrame{Op: wire.OpDevices})
}

func (a *api) serveSignOutDelete(w http.ResponseWriter, r *http.Request) {
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	a.m.frames.WithLabelValues(wire.OpSignOut, "http").Inc()
	f := &wire.ClientFrame{Op: wire.OpSignOut, DeviceID: r.PathValue("device_id")}
	if aerr := f.Validate(a.cfg.Limits); aerr != nil {
		a.httpError(w, "", aerr)
		return
	}
	a.serveFrame(w, r, p, f)
}

// servePresenceGet takes user_ids comma-separated, or repeated.
func (a *api) servePresenceGet(w http.ResponseWriter, r *http.Request) {
	p, ok := a.principal(w, r)
	if !ok {
		return
	}
	a.m.frames.WithLabelValues(wire.OpPresence, "http").Inc()
	f := &wire.ClientFrame{Op: wire.OpPresence}
	for _, v := range r.URL.Query()["user_ids"] {
		for _, u := range strings.Split(v, ",") {
			if u = strings.TrimSpace(u); u != "" {
				f.UserIDs = append(f.UserIDs, u)
			}
		}
	}
	if aerr := f.Validate(a.cfg.Limits); aerr != nil {
		a.httpError(w, "", aerr)
		return
	}
	a.serveFrame(w, r, p, f)
}

// devLogin is the body of POST /v1/dev/login.
type devLogin struct {
	UserID   string `json:"user_id"`
	DeviceID string `json:"device_id"`
}

// serveDevLogin mints a token for anyone who asks. It exists only with
// GATEWAY_DEV_MODE=true.
func (a *api) serveDevLogin(w http.ResponseWriter, r *http.Request) {
	var req devLogin
	if err := json.NewDecoder(io.LimitReader(r.Body, 4096)).Decode(&req); err != nil {
		a.httpError(w, "", apierr.New(imv1.ErrorCode_ERROR_CODE_BAD_FRAME, "want {\"user_id\":..., \"device_id\":...}"))
		return
	}
	tok, err := a.signer.Mint(req.UserID, req.DeviceID, a.cfg.DevTokenTTL)
	if err != nil {
		a.httpError(w, "", apierr.New(imv1.ErrorCode_ERROR_CODE_INVALID_FIELD, err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"token": tok, "expires_at": a.now().Add(a.cfg.DevTokenTTL).Unix()})
}

func (a *api) httpError(w http.ResponseWriter, clientMsgID string, e *apierr.Error) {
	a.m.errors.WithLabelValues(apierr.Name(e.Code)).Inc()
	b := e.Body()
	if e.Code == imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED || e.Code == imv1.ErrorCode_ERROR_CODE_TOKEN_EXPIRED {
		w.Header().Set("WWW-Authenticate", `Bearer realm="seqflow"`)
	}
	writeJSON(w, e.HTTPStatus(), wire.ErrorFrame{Op: wire.OpError, ClientMsgID: clientMsgID,
		Error: wire.ErrorBody{Code: b.Code, Name: b.Name, Message: b.Message, Retryable: b.Retryable}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"op":"error","error":{"code":5003,"name":"internal","message":"encode response","retryable":true}}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
