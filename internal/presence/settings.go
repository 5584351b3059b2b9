package presence

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Settings keeps users' account settings: account state, like Devices, not
// conversation state, so nothing of it is sequenced. One hash per user:
//
//	seqflow:settings:{user}  read_receipts → "0" while the user does not send read receipts
//
// A setting at its default has no field, so only users who changed one
// hold a key. The key never expires: a privacy setting must not turn
// itself back on after a quiet month, as a device record may drop off.
type Settings struct {
	rdb redis.UniversalClient
}

// NewSettings returns the settings kept in rdb.
func NewSettings(rdb redis.UniversalClient) *Settings { return &Settings{rdb: rdb} }

func settingsKey(user string) string { return "seqflow:settings:{" + user + "}" }

const fieldReadReceipts = "read_receipts"

// SetReadReceipts records whether user sends read receipts (the default
// is on).
func (s *Settings) SetReadReceipts(ctx context.Context, user string, on bool) error {
	var err error
	if on {
		err = s.rdb.HDel(ctx, settingsKey(user), fieldReadReceipts).Err()
	} else {
		err = s.rdb.HSet(ctx, settingsKey(user), fieldReadReceipts, "0").Err()
	}
	if err != nil {
		return fmt.Errorf("set read receipts of %s: %w", user, err)
	}
	return nil
}

// ReadReceiptsOff returns those of users who turned read receipts off, in
// one pipeline.
func (s *Settings) ReadReceiptsOff(ctx context.Context, users []string) (map[string]bool, error) {
	off := map[string]bool{}
	if len(users) == 0 {
		return off, nil
	}
	cmds := make([]*redis.StringCmd, len(users))
	_, err := s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, u := range users {
			cmds[i] = p.HGet(ctx, settingsKey(u), fieldReadReceipts)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read settings: %w", err)
	}
	for i, c := range cmds {
		if c.Val() == "0" {
			off[users[i]] = true
		}
	}
	return off, nil
}
