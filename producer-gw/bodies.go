package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/seqflow/seqflow/internal/admin"
	"github.com/seqflow/seqflow/internal/apierr"
	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/erasure"
	"github.com/seqflow/seqflow/internal/keystore"
	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// bodies seals message and edit bodies before they enter Kafka and opens
// them for the gateway's clients (pushes, sync, previews), with the data
// keys of internal/keystore (docs/erasure.md). With no KEK configured
// (SEQFLOW_KEK unset) it is nil and bodies travel in plaintext; every
// method is a no-op on a nil *bodies.
type bodies struct {
	ks  *keystore.Store
	log *slog.Logger
	m   *metrics
}

// keyTimeout bounds a key-store call on a client's path.
const keyTimeout = 2 * time.Second

// seal seals c in place for sender's message to session. A key store that
// does not answer refuses the command (UNAVAILABLE: the client retries
// with the same client_msg_id); it never sends the body unsealed.
func (b *bodies) seal(ctx context.Context, session, sender string, c *imv1.MessageContent) *apierr.Error {
	if b == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, keyTimeout)
	defer cancel()
	err := b.ks.SealContent(ctx, session, sender, c)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, keystore.ErrOwnerErased):
		return apierr.New(imv1.ErrorCode_ERROR_CODE_NOT_PERMITTED, "this user was erased; nothing more can be sent as them")
	default:
		b.m.keyErrors.WithLabelValues("seal").Inc()
		b.log.Warn("seal a body", "session_id", session, "err", err)
		return apierr.New(imv1.ErrorCode_ERROR_CODE_UNAVAILABLE, "the key store is unavailable; retry with the same client_msg_id")
	}
}

// open returns the plaintext of a body sealed with keyID (0: body as is);
// erased is true when its key was destroyed. An error means the key store
// did not answer: the body may open later.
func (b *bodies) open(ctx context.Context, keyID int64, body []byte, session, sender string) (plain []byte, erased bool, err error) {
	if keyID == 0 {
		return body, false, nil
	}
	if b == nil {
		// Sealed elsewhere, and this gateway holds no keys.
		return nil, false, errors.New("a sealed body and no SEQFLOW_KEK")
	}
	ctx, cancel := context.WithTimeout(ctx, keyTimeout)
	defer cancel()
	plain, err = b.ks.OpenBody(ctx, keyID, body, session, sender)
	if keystore.Erased(err) {
		return nil, true, nil
	}
	if err != nil {
		b.m.keyErrors.WithLabelValues("open").Inc()
		return nil, false, err
	}
	return plain, false, nil
}

// wireEvent is ev as a client sees it, with its content's body opened
// (no copy of ev is made). Erased is set when the body's key was
// destroyed (the message then has no body).
func (b *bodies) wireEvent(ctx context.Context, ev *imv1.SequencedEvent) (wire.Message, error) {
	msg := wire.FromEvent(ev)
	var c *imv1.MessageContent
	switch p := ev.Payload.(type) {
	case *imv1.SequencedEvent_Message:
		c = p.Message
	case *imv1.SequencedEvent_Edit:
		c = p.Edit.GetContent()
	}
	if c.GetKeyId() == 0 {
		return msg, nil
	}
	plain, erased, err := b.open(ctx, c.KeyId, c.Body, ev.SessionId, ev.SenderUserId)
	if err != nil {
		return wire.Message{}, err
	}
	msg.Body, msg.Erased = wire.BodyJSON(c.Type, plain), erased
	return msg, nil
}

// openStored opens a stored message's body in place; erased as openEvent.
func (b *bodies) openStored(ctx context.Context, m *store.Message) (erased bool, err error) {
	if m.BodyKeyID == 0 {
		return false, nil
	}
	plain, erased, err := b.open(ctx, m.BodyKeyID, m.Body, m.SessionID, m.SenderUserID)
	if err != nil {
		return false, err
	}
	m.Body, m.BodyKeyID = plain, 0
	return erased, nil
}

// adminRoutes are the gateway's own operator endpoints on its admin port,
// behind internal/admin's operator tokens: POST /erase/user (with
// SEQFLOW_KEK; docs/erasure.md).
func (g *Gateway) adminRoutes() map[string]http.Handler {
	if g.keys == nil {
		return nil
	}
	return map[string]http.Handler{"POST /erase/user": http.HandlerFunc(g.eraseUser)}
}

// eraseRequest is POST /erase/user's body. The actor is not a field: it
// is the name of the operator token that authenticated the request.
type eraseRequest struct {
	UserID string `json:"user_id"`
	// Actor is read only to refuse it with a reason.
	Actor *string `json:"actor"`
}

// eraseUser erases the user named by the JSON body's user_id, recording
// the authenticated operator (admin.Actor) as its actor in the key store,
// the erasure records appended to the log, the log line and the answer:
// what internal/erasure did, as JSON. 400 bad_request for a missing
// user_id or an actor in the body, 503 unavailable when a step failed
// (the erasure can be run again).
func (g *Gateway) eraseUser(w http.ResponseWriter, r *http.Request) {
	var req eraseRequest
	if e := admin.DecodeJSON(r, &req); e != nil {
		admin.WriteError(w, e)
		return
	}
	switch {
	case req.Actor != nil:
		admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Code: admin.CodeBadRequest,
			Reason: "actor is not a field: the erasure records the name of the operator token that authenticated it"})
		return
	case req.UserID == "":
		admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Code: admin.CodeBadRequest,
			Reason: "user_id is required: the user to erase"})
		return
	case auth.ValidID(req.UserID) != nil:
		admin.WriteError(w, &admin.Error{Status: http.StatusBadRequest, Code: admin.CodeBadRequest,
			Reason: "user_id: " + auth.ValidID(req.UserID).Error()})
		return
	}
	actor := admin.Actor(r.Context())
	ctx, cancel := context.WithTimeout(r.Context(), time.Minute)
	defer cancel()
	res, err := erasure.EraseUser(ctx, erasure.Deps{Keys: g.keys, Store: g.store, Kafka: g.kc, Topics: g.cfg.Topics,
		Devices: presence.NewDevices(g.rdb, g.cfg.DeviceRetention), Log: g.log}, req.UserID, actor)
	if err != nil {
		g.log.Error("erase user", "user_id", req.UserID, "actor", actor, "err", err)
		admin.WriteError(w, &admin.Error{Status: http.StatusServiceUnavailable, Code: admin.CodeUnavailable,
			Reason: "erasure incomplete, run it again: " + err.Error()})
		return
	}
	admin.WriteJSON(w, http.StatusOK, res.Report())
}
