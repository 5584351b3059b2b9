package main

import (
	"context"
	"log/slog"

	"github.com/seqflow/seqflow/internal/apierr"
	"github.com/seqflow/seqflow/internal/auth"
	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/internal/wire"
)

// settingsStore is users' account settings (presence.Settings in Redis).
// Each call blocks on Redis; ctx bounds it.
type settingsStore interface {
	SetReadReceipts(ctx context.Context, user string, on bool) error
	ReadReceiptsOff(ctx context.Context, users []string) (map[string]bool, error)
}

var _ settingsStore = (*presence.Settings)(nil)

// settings answers the settings op and tells the receipts and seen_by
// whose read cursors may be shown. A user's read receipts are account
// state: turning them off is not sequenced and does not stop the user's
// read cursor, which their own unread counts follow; it hides the cursor
// from the other members. When Redis cannot say, a cursor is hidden:
// a read receipt is ephemeral and may be lost anyway, a shown one that
// the user turned off cannot be taken back.
type settings struct {
	store settingsStore
	log   *slog.Logger
}

func newSettings(st settingsStore, log *slog.Logger) *settings {
	return &settings{store: st, log: log}
}

// answer sets what f sets and returns the settings in effect.
func (s *settings) answer(ctx context.Context, p auth.Principal, f *wire.ClientFrame) (wire.SettingsResult, *apierr.Error) {
	res := wire.SettingsResult{Op: wire.OpResult, ReqID: f.ReqID}
	if f.ReadReceipts != nil {
		if err := s.store.SetReadReceipts(ctx, p.UserID, *f.ReadReceipts); err != nil {
			return res, redisError(err)
		}
		res.ReadReceipts = *f.ReadReceipts
		return res, nil
	}
	off, err := s.store.ReadReceiptsOff(ctx, []string{p.UserID})
	if err != nil {
		return res, redisError(err)
	}
	res.ReadReceipts = !off[p.UserID]
	return res, nil
}

// showsReads says whether user's read cursors may be shown to the other
// members; false when Redis does not answer.
func (s *settings) showsReads(ctx context.Context, user string) bool {
	off, err := s.store.ReadReceiptsOff(ctx, []string{user})
	if err != nil {
		s.log.Warn("read receipt setting; receipt not shown", "user_id", user, "err", err)
		return false
	}
	return !off[user]
}

// hidden returns those of users whose read cursors are not shown.
func (s *settings) hidden(ctx context.Context, users []string) ([]string, error) {
	off, err := s.store.ReadReceiptsOff(ctx, users)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(off))
	for u := range off {
		out = append(out, u)
	}
	return out, nil
}
