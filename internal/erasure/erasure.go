// Package erasure erases a user from seqflow (docs/erasure.md, "Erasing a
// user"), in this order:
//
//  1. their data keys are destroyed (internal/keystore): every body they
//     ever sent stops opening in every copy, and they can send nothing
//     more;
//  2. they leave every session they are a member of through the log: one
//     uplink per session, a removal of themselves carrying the erasure
//     record (MembershipChange.erasure: who asked, when; no content), which
//     the group rules let pass whatever their role. Where they own a
//     group, an ownership transfer to its longest-standing admin (else
//     member) goes first, so the group keeps an owner. Being sequenced
//     events, the leaves reach the store, the pushers, replays and audits
//     alike. Once the store holds the log up to the erasure (the
//     persister lags it), the sessions are listed again and any one not
//     left yet (joined just before) is left too;
//  3. their devices are signed out (their tokens stop working, their
//     connections close with 4002), when Redis is given.
//
// Every step is idempotent: running the erasure again redoes what an
// interrupted run did not finish (the uplinks reuse their client message
// IDs, so the sequencer collapses the repeats it still remembers, and a
// leave of a session already left is refused as not_a_member).
package erasure

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/internal/keystore"
	"github.com/seqflow/seqflow/internal/presence"
	"github.com/seqflow/seqflow/internal/store"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// Deps are what an erasure touches.
type Deps struct {
	Keys   *keystore.Store
	Store  *store.Store
	Kafka  *kgo.Client // a producer (eventlog.ProducerOpts)
	Topics eventlog.Topics
	// Devices signs the user's devices out; nil skips it (no Redis).
	Devices *presence.Devices
	Log     *slog.Logger
}

// Result is what an erasure did.
type Result struct {
	keystore.Erasure
	Actor string
	// Sessions: the sessions the user was a member of, each sent a leave.
	Sessions int
	// Transfers: groups the user owned whose ownership was passed on.
	Transfers int
	// DevicesSignedOut: devices signed out (-1: no Redis given).
	DevicesSignedOut int
}

// producerName is the producer header of the erasure's uplinks.
const producerName = "seqflow-erasure"

// EraseUser erases user; actor is recorded with it.
func EraseUser(ctx context.Context, d Deps, user, actor string) (Result, error) {
	if user == "" || actor == "" {
		return Result{}, errors.New("erasure: user and actor are required")
	}
	res := Result{Actor: actor, DevicesSignedOut: -1}
	e, err := d.Keys.EraseUser(ctx, user, actor)
	if err != nil {
		return res, fmt.Errorf("destroy the keys of %s: %w", user, err)
	}
	res.Erasure = e
	// What the log held once the keys were gone: a session created just
	// before may not be in the store yet (the persister lags the log by
	// its batch time), so the sessions are listed again once the store
	// holds all of it, and any not left yet is left too.
	ends, err := eventlog.StableEnds(ctx, kadm.NewClient(d.Kafka), d.Topics.Sequenced, nil, time.Now().Add(catchUpTimeout))
	if err != nil {
		return res, fmt.Errorf("find the end of %s: %w", d.Topics.Sequenced, err)
	}
	at := e.ErasedAt.UnixMilli()
	left := map[string]bool{}
	if err := leaveAll(ctx, d, &res, left, user, actor, at); err != nil {
		return res, err
	}
	if err := storeHolds(ctx, d, ends); err != nil {
		return res, fmt.Errorf("the store does not yet hold %s up to the erasure (run it again): %w", d.Topics.Sequenced, err)
	}
	if err := leaveAll(ctx, d, &res, left, user, actor, at); err != nil {
		return res, err
	}
	if d.Devices != nil {
		n, err := signOut(ctx, d.Devices, user)
		if err != nil {
			return res, err
		}
		res.DevicesSignedOut = n
	}
	if d.Log != nil {
		d.Log.Info("user erased", "user_id", user, "actor", actor, "keys_destroyed", e.KeysDestroyed,
			"sessions", res.Sessions, "transfers", res.Transfers, "devices_signed_out", res.DevicesSignedOut, "again", e.Again)
	}
	return res, nil
}

// catchUpTimeout bounds the wait for the log's open transactions, and then
// the wait for the store to hold the log up to the erasure.
const catchUpTimeout = 10 * time.Second

// leaveAll sends user's leave (after an ownership transfer where user owns
// a group) to every session the store lists user in that is not in left
// yet, and adds them to left and to res.
func leaveAll(ctx context.Context, d Deps, res *Result, left map[string]bool, user, actor string, at int64) error {
	states, err := d.Store.Changes(ctx, user)
	if err != nil {
		return fmt.Errorf("list the sessions of %s: %w", user, err)
	}
	var recs []*kgo.Record
	for _, s := range states {
		if left[s.SessionID] {
			continue
		}
		if s.Role == "owner" {
			to, err := successor(ctx, d.Store, s.SessionID, user)
			if err != nil {
				return err
			}
			if to != "" {
				u := uplink(s.SessionID, user, fmt.Sprintf("erasure-transfer:%s:%d", user, at))
				u.Command = &imv1.Uplink_Group{Group: &imv1.GroupChange{Op: &imv1.GroupChange_TransferOwnership_{
					TransferOwnership: &imv1.GroupChange_TransferOwnership{UserId: to}}}}
				rec, err := record(d.Topics, "group", u)
				if err != nil {
					return err
				}
				recs = append(recs, rec)
				res.Transfers++
			}
		}
		u := uplink(s.SessionID, user, fmt.Sprintf("erasure:%s:%d", user, at))
		u.Command = &imv1.Uplink_Membership{Membership: &imv1.MembershipChange{
			Op: imv1.MembershipChange_OP_REMOVE, UserIds: []string{user},
			Erasure: &imv1.Erasure{Actor: actor, ErasedAtMs: at}}}
		rec, err := record(d.Topics, "membership", u)
		if err != nil {
			return err
		}
		recs = append(recs, rec)
		left[s.SessionID] = true
		res.Sessions++
	}
	if len(recs) == 0 {
		return nil
	}
	// One session's records share a key, so the partition keeps their
	// order: the transfer before the leave.
	if err := d.Kafka.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("produce the leaves of %s: %w", user, err)
	}
	return nil
}

// storeHolds waits until the store holds every committed event of the
// sequenced log below ends (per partition): its stored offset is at the
// end, or what lies between is only transaction markers and aborted
// records.
func storeHolds(ctx context.Context, d Deps, ends map[int32]int64) error {
	topic := d.Topics.Sequenced
	deadline := time.Now().Add(catchUpTimeout)
	// A reader of its own: d.Kafka's options carry its hooks (metrics),
	// which must not be shared with another client.
	brokers, _ := d.Kafka.OptValue(kgo.SeedBrokers).([]string)
	opts := eventlog.ClientOpts(brokers, producerName)
	for {
		stored, err := d.Store.StoredOffsets(ctx, topic)
		if err != nil {
			return err
		}
		behind := int32(-1)
		for p, end := range ends {
			from, ok := stored[p]
			if ok && from >= end {
				continue
			}
			if !ok {
				from = -1 // never written: from the partition's start
			}
			n := 0
			if _, err := eventlog.ReadCommitted(ctx, opts, topic, p, from, end, 5*time.Second, func(*kgo.Record) { n++ }); err != nil {
				return err
			}
			if n > 0 {
				behind = p
				break
			}
		}
		if behind < 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("partition %d still behind after %v", behind, catchUpTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// successor is who gets a group user owns: its admin with the lowest
// joined seq, else its member with the lowest joined seq, among the first
// 10,000 members by user ID; "" when user is alone.
func successor(ctx context.Context, st *store.Store, session, user string) (string, error) {
	ms, err := st.MemberPage(ctx, session, "", 10_000)
	if err != nil {
		return "", fmt.Errorf("list the members of %s: %w", session, err)
	}
	var best store.Member
	rank := func(m store.Member) int {
		if m.Role == "admin" {
			return 2
		}
		return 1
	}
	for _, m := range ms {
		if m.UserID == user || m.Role == "owner" {
			continue
		}
		if best.UserID == "" || rank(m) > rank(best) || (rank(m) == rank(best) && m.JoinedSeq < best.JoinedSeq) {
			best = m
		}
	}
	return best.UserID, nil
}

func uplink(session, user, clientMsgID string) *imv1.Uplink {
	now := time.Now().UnixMilli()
	return &imv1.Uplink{SessionId: session, ClientMsgId: clientMsgID, SenderUserId: user, SenderDeviceId: "erasure",
		GatewayId: producerName, ClientTsMs: now, GatewayTsMs: now}
}

func record(t eventlog.Topics, eventType string, u *imv1.Uplink) (*kgo.Record, error) {
	v, err := proto.Marshal(u)
	if err != nil {
		return nil, err
	}
	return &kgo.Record{Topic: t.Uplink, Key: []byte(u.SessionId), Value: v,
		Headers: eventlog.Headers(eventType, "seqflow.im.v1.Uplink", producerName, "")}, nil
}

// signOut signs out every listed device of user and announces it, so
// every gateway closes their connections.
func signOut(ctx context.Context, d *presence.Devices, user string) (int, error) {
	devs, err := d.List(ctx, []string{user})
	if err != nil {
		return 0, err
	}
	cutoff := time.Now().Unix()
	for _, dv := range devs[user] {
		k := presence.DeviceKey{UserID: user, DeviceID: dv.DeviceID}
		if err := d.SignOut(ctx, k, cutoff); err != nil {
			return 0, err
		}
		if err := d.Announce(ctx, presence.Signal{Kind: presence.SignalSignOut, UserID: user, DeviceID: dv.DeviceID, Cutoff: cutoff}); err != nil {
			return 0, err
		}
	}
	return len(devs[user]), nil
}

// Report is r as the erase command and the gateway's admin call print it.
func (r Result) Report() map[string]any {
	return map[string]any{
		"user_id": r.UserID, "actor": r.Actor, "erased_at": r.ErasedAt, "again": r.Again,
		"keys_destroyed": r.KeysDestroyed, "sessions_left": r.Sessions, "ownership_transfers": r.Transfers,
		"devices_signed_out": r.DevicesSignedOut,
	}
}
