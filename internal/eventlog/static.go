package eventlog

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
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
// FENCED_INSTANCE_ID, which IsFenced recognises so the service can stop
// with an error that names the setting.

// StaticMember is the group option that makes a consumer a static member
// under instanceID.
func StaticMember(instanceID string) kgo.GroupOpt { return kgo.InstanceID(instanceID) }

// LeaveStatic removes the static member instanceID from group with a
// short-lived client of its own (the consumer's client is closed by then).
// A member that is already gone is not an error.
func LeaveStatic(ctx context.Context, brokers []string, clientID, group, instanceID string) error {
	cl, err := kgo.NewClient(ClientOpts(brokers, clientID)...)
	if err != nil {
		return fmt.Errorf("leave group %s as %s: %w", group, instanceID, err)
	}
	defer cl.Close()
	resp, err := kadm.NewClient(cl).LeaveGroup(ctx, kadm.LeaveGroup(group).InstanceIDs(instanceID).Reason("orderly shutdown"))
	if err == nil {
		err = resp.Error()
	}
	if err != nil && !errors.Is(err, kerr.UnknownMemberID) {
		return fmt.Errorf("leave group %s as %s: %w", group, instanceID, err)
	}
	return nil
}

// LeaveAfterStop is LeaveStatic for a service's orderly shutdown, bounded
// to 5s; a failure is logged, since the member's partitions then wait for
// its session timeout.
func LeaveAfterStop(log *slog.Logger, brokers []string, service, group, instanceID string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := LeaveStatic(ctx, brokers, "seqflow-"+service+"-"+instanceID+"-leave", group, instanceID); err != nil {
		log.Warn("shutdown: could not leave the consumer group; its partitions wait for the session timeout", "err", err)
	}
}

// IsFenced reports whether err means another live member of the group
// joined with the same instance ID.
func IsFenced(err error) bool { return errors.Is(err, kerr.FencedInstanceID) }
