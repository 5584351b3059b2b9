package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/seqflow/seqflow/internal/apierr"
	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/wire"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// storeTimeout bounds each store read a request makes.
const storeTimeout = 3 * time.Second

// api is the client API: the WebSocket endpoint (serveWS, one conn per
// socket) and the HTTP calls (routes), both taking the frames of
// docs/protocol.md. It authenticates, rate-limits and hands each frame to
// the component that answers it: commands to the uplink, sync and changes
// to the history, receipts to the receipts, typing indicators to signals.
type api struct {
	cfg      Config
	verifier *auth.Verifier
	signer   *auth.Signer // dev login only
	gate     *gate
	hub      *hub
	presence presenceWriter
	limits   *limiter
	up       *uplink
	history  *history
	receipts *receipts
	signals  *signals
	devices  *devices
	settings *settings
	// recounter recounts a connection's unread after a read below its seed.
	recounter *recounter
	// conns counts users' connections and requests (connlimit.go); nil:
	// no per-user cap.
	conns *connLimits
	// members says which membership answers are at hand (cost); nil: none.
	members knownMembers
	log     *slog.Logger
	m       *metrics
	now     func() time.Time
}

func newAPI(cfg Config, verifier *auth.Verifier, signer *auth.Signer, gate *gate, hub *hub, pw presenceWriter, limits *limiter,
	up *uplink, history *history, receipts *receipts, signals *signals, devices *devices, settings *settings, recounter *recounter, log *slog.Logger, m *metrics, now func() time.Time) *api {
	return &api{cfg: cfg, verifier: verifier, signer: signer, gate: gate, hub: hub, presence: pw, limits: limits,
		up: up, history: history, receipts: receipts, signals: signals, devices: devices, settings: settings, recounter: recounter,
		log: log, m: m, now: now}
}

// read produces f's read receipt (receipts.read, known as there) and fans
// the cursor out; it returns the seq marked read, 0 for none.
func (a *api) read(ctx context.Context, p auth.Principal, f *wire.ClientFrame, known func(string) int64) (wire.OK, int64, *apierr.Error) {
	ctx, cancel := context.WithTimeout(ctx, storeTimeout+cursorBoundWait)
	defer cancel()
	res, seq, aerr := a.receipts.read(ctx, p, f, known)
	if aerr == nil && seq > 0 {
		// To the user's own devices always (their unread counts), to
		// the other members unless the user turned read receipts off.
		a.signals.cursor(p.UserID, f.SessionID, wire.ReceiptRead, seq, a.settings.showsReads(ctx, p.UserID))
	}
	return res, seq, aerr
}

// query answers sync, changes, read, the member, device and presence
// queries, each within storeTimeout.
func (a *api) query(ctx context.Context, p auth.Principal, f *wire.ClientFrame) (any, *apierr.Error) {
	if f.Op == wire.OpRead {
		res, _, aerr := a.read(ctx, p, f, nil) // its own timeout: the bound may wait
		if aerr != nil {
			return nil, aerr
		}
		return res, nil
	}
	ctx, cancel := context.WithTimeout(ctx, storeTimeout)
	defer cancel()
	var (
		res  any
		aerr *apierr.Error
	)
	switch f.Op {
	case wire.OpSync:
		res, aerr = a.history.sync(ctx, p, f)
	case wire.OpChanges:
		res, aerr = a.history.changes(ctx, p, f)
	case wire.OpSeenBy:
		res, aerr = a.history.seenBy(ctx, p, f)
	case wire.OpMemberList:
		res, aerr = a.history.memberList(ctx, p, f)
	case wire.OpMemberChanges:
		res, aerr = a.history.memberChanges(ctx, p, f)
	case wire.OpDevices:
		res, aerr = a.devices.list(ctx, p, f)
	case wire.OpPresence:
		res, aerr = a.devices.presence(ctx, p, f)
	case wire.OpSettings:
		res, aerr = a.settings.answer(ctx, p, f)
	default:
		return nil, apierr.Newf(imv1.ErrorCode_ERROR_CODE_UNKNOWN_TYPE, "op %q is not a query", f.Op)
	}
	if aerr != nil {
		return nil, aerr
	}
	return res, nil
}
