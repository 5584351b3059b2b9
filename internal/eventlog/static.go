package eventlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Static group membership (KIP-345). A consumer that joins its group with
// a group.instance.id keeps its assignment across a restart with the same
// ID: the coordinator swaps the new member in for the old one and hands it
// the same partitions, with no rebalance of the other members and without
// waiting for the dead one's session timeout. A kill -9 followed by a
// restart (a crashed pod the orchestrator brings back under its name)
// costs the start-up, not the session timeout plus two rebalances.
//
// franz-go does not leave the group when a static member closes, so that
// the restart finds its partitions reserved; a consumer that is stopped on
// purpose (scaled down, or restarted under another ID) would leave them
// unconsumed until its session timeout. seqflow's consumers therefore
// LeaveStatic after an orderly shutdown: orderly stops cost a rebalance,
// as with dynamic membership, and only crashes are spared one.
//
// Two live members with one instance ID fence each other: the older gets
// FENCED_INSTANCE_ID, which IsFenced (errors.go) recognises so the service
// can stop with a FencedError that names the setting.

// StaticMember is the group option that makes a consumer a static member
// under instanceID.
func StaticMember(instanceID string) kgo.GroupOpt { return kgo.InstanceID(instanceID) }

// LeaveStatic removes the static member instanceID, which joined as
// memberID, from group with a short-lived client of its own (the
// consumer's client is closed by then). Naming the member ID as well makes
// the broker refuse (FENCED_INSTANCE_ID) when a newer member holds the
// instance ID now, a restart under the same ID that came quickly, instead
// of removing that one. A member that is already gone or was replaced is
// not an error; an empty memberID (it never joined) leaves nothing.
func LeaveStatic(ctx context.Context, brokers []string, clientID, group, instanceID, memberID string) error {
	if memberID == "" {
		return nil
	}
	cl, err := kgo.NewClient(ClientOpts(brokers, clientID)...)
	if err != nil {
		return fmt.Errorf("leave group %s as %s: %w", group, instanceID, err)
	}
	defer cl.Close()
	req := kmsg.NewPtrLeaveGroupRequest()
	req.Group = group
	m := kmsg.NewLeaveGroupRequestMember()
	m.MemberID = memberID
	m.InstanceID = kmsg.StringPtr(instanceID)
	m.Reason = kmsg.StringPtr("orderly shutdown")
	req.Members = append(req.Members, m)
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
		for _, rm := range resp.Members {
			if err == nil {
				err = kerr.ErrorForCode(rm.ErrorCode)
			}
		}
	}
	if err != nil && !errors.Is(err, kerr.UnknownMemberID) && !errors.Is(err, kerr.FencedInstanceID) {
		return fmt.Errorf("leave group %s as %s: %w", group, instanceID, err)
	}
	return nil
}

// LeaveAfterStop is LeaveStatic for a service's orderly shutdown, bounded
// to 5s; a failure is logged, since the member's partitions then wait for
// its session timeout.
func LeaveAfterStop(log *slog.Logger, brokers []string, service, group, instanceID, memberID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := LeaveStatic(ctx, brokers, "seqflow-"+service+"-"+instanceID+"-leave", group, instanceID, memberID); err != nil {
		log.Warn("shutdown: could not leave the consumer group; its partitions wait for the session timeout", "err", err)
	}
}
