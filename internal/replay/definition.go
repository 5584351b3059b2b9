package replay

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/internal/eventlog"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// TopicDefinitions holds every replay's definition (ReplayDefinition),
// keyed by name, compacted: the latest record of a name is its
// definition, one with deleted set (or without value) means none.
const TopicDefinitions = "im.replays.v1"

// TopicName is the replay topic of the replay name under prefix:
// <prefix>im.replay.<name>.v1.
func TopicName(prefix, name string) string { return prefix + "im.replay." + name + ".v1" }

// TransactionalID is the Kafka transactional ID every replayer of the
// replay uses: one per replay, so a new replayer fences the one before.
func TransactionalID(prefix, name string) string { return "seqflow-replay-" + prefix + name }

const maxNameLen = 100

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// CheckName says whether name can name a replay: 1-100 letters, digits,
// '-' or '_' (no '.', so a replay topic's name parses back to one name).
func CheckName(name string) error {
	if len(name) == 0 || len(name) > maxNameLen || !nameRE.MatchString(name) {
		return &InvalidNameError{Name: name}
	}
	return nil
}

// NewRequest is a request with nothing set: every committed event of the
// log at creation.
func NewRequest() *imv1.ReplayRequest {
	return &imv1.ReplayRequest{FromOffset: -1, ToOffset: -1}
}

// Full reports whether req asks for the whole log (as it is at creation):
// no offset, time or filter bound. Only a full replay can rebuild a store.
func Full(req *imv1.ReplayRequest) bool {
	return req.GetFromOffset() < 0 && req.GetToOffset() < 0 && len(req.GetPartitionRanges()) == 0 &&
		req.GetFromTsMs() == 0 && req.GetToTsMs() == 0 && len(req.GetSessionIds()) == 0 && len(req.GetSenderUserIds()) == 0
}

// Describe says what req asks for, in words.
func Describe(req *imv1.ReplayRequest) string {
	var parts []string
	if len(req.GetPartitionRanges()) > 0 {
		var rs []string
		for _, r := range req.GetPartitionRanges() {
			to := "end"
			if r.GetToOffset() >= 0 {
				to = strconv.FormatInt(r.GetToOffset(), 10)
			}
			rs = append(rs, fmt.Sprintf("%d:%d-%s", r.GetPartition(), r.GetFromOffset(), to))
		}
		parts = append(parts, "offsets "+strings.Join(rs, ","))
	}
	if req.GetFromOffset() >= 0 {
		parts = append(parts, fmt.Sprintf("from offset %d", req.GetFromOffset()))
	}
	if req.GetToOffset() >= 0 {
		parts = append(parts, fmt.Sprintf("to offset %d", req.GetToOffset()))
	}
	ts := func(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) }
	if req.GetFromTsMs() != 0 {
		parts = append(parts, "from "+ts(req.GetFromTsMs()))
	}
	if req.GetToTsMs() != 0 {
		parts = append(parts, "to "+ts(req.GetToTsMs()))
	}
	if s := req.GetSessionIds(); len(s) > 0 {
		parts = append(parts, "sessions "+strings.Join(s, ","))
	}
	if u := req.GetSenderUserIds(); len(u) > 0 {
		parts = append(parts, "senders "+strings.Join(u, ","))
	}
	if len(parts) == 0 {
		return "whole log"
	}
	return strings.Join(parts, ", ")
}

// normalize sorts and de-duplicates the lists of req, so that two requests
// for the same events compare equal.
func normalize(req *imv1.ReplayRequest) *imv1.ReplayRequest {
	req = proto.CloneOf(req)
	sortUniq := func(s []string) []string {
		s = slices.Clone(s)
		slices.Sort(s)
		return slices.Compact(s)
	}
	req.SessionIds = sortUniq(req.SessionIds)
	req.SenderUserIds = sortUniq(req.SenderUserIds)
	slices.SortFunc(req.PartitionRanges, func(a, b *imv1.ReplayRange) int { return int(a.GetPartition() - b.GetPartition()) })
	return req
}

// Resolve turns req into one offset range per partition of the source
// topic, as the log is now: it starts no earlier than the log start and
// ends no later than the last stable offset (everything before it is
// committed or aborted), so a replay never waits for events to come.
// Times go through Kafka's time index: from the first record at or after
// FromTsMs to the first at or after ToTsMs.
func Resolve(ctx context.Context, adm *kadm.Client, source string, req *imv1.ReplayRequest) ([]*imv1.ReplayRange, error) {
	starts, err := listed(adm.ListStartOffsets(ctx, source))
	if err != nil {
		return nil, err
	}
	stable, err := listed(adm.ListCommittedOffsets(ctx, source))
	if err != nil {
		return nil, err
	}
	var afterFrom, afterTo map[int32]int64
	if req.GetFromTsMs() != 0 {
		if afterFrom, err = listed(adm.ListOffsetsAfterMilli(ctx, req.GetFromTsMs(), source)); err != nil {
			return nil, err
		}
	}
	if req.GetToTsMs() != 0 {
		if afterTo, err = listed(adm.ListOffsetsAfterMilli(ctx, req.GetToTsMs(), source)); err != nil {
			return nil, err
		}
	}
	n := int32(len(stable))
	asked := map[int32]*imv1.ReplayRange{}
	for _, r := range req.GetPartitionRanges() {
		if r.GetPartition() < 0 || r.GetPartition() >= n {
			return nil, fmt.Errorf("partition %d: %s has partitions 0-%d", r.GetPartition(), source, n-1)
		}
		asked[r.GetPartition()] = r
	}
	out := make([]*imv1.ReplayRange, n)
	for p := range n {
		start, end, ok := starts[p], stable[p], true
		from, to := start, end
		if len(asked) > 0 {
			var r *imv1.ReplayRange
			if r, ok = asked[p]; ok {
				from = max(from, r.GetFromOffset())
				if r.GetToOffset() >= 0 {
					to = min(to, r.GetToOffset())
				}
			}
		}
		if req.GetFromOffset() >= 0 {
			from = max(from, req.GetFromOffset())
		}
		if req.GetToOffset() >= 0 {
			to = min(to, req.GetToOffset())
		}
		if afterFrom != nil {
			from = max(from, afterFrom[p])
		}
		if afterTo != nil {
			to = min(to, afterTo[p])
		}
		if !ok || to < from {
			to = from
		}
		from, to = min(from, end), min(to, end)
		out[p] = &imv1.ReplayRange{Partition: p, FromOffset: from, ToOffset: to}
	}
	return out, nil
}

// listed returns partition → offset of the one topic of a listing.
func listed(l kadm.ListedOffsets, err error) (map[int32]int64, error) {
	if err != nil {
		return nil, fmt.Errorf("list offsets: %w", err)
	}
	out := map[int32]int64{}
	var first error
	l.Each(func(o kadm.ListedOffset) {
		if o.Err != nil && first == nil {
			first = fmt.Errorf("list offsets of %s/%d: %w", o.Topic, o.Partition, o.Err)
		}
		out[o.Partition] = o.Offset
	})
	if first != nil {
		return nil, first
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("list offsets: topic not found")
	}
	return out, nil
}

// Definitions reads and writes the replay definitions of one topic prefix.
type Definitions struct {
	brokers []string
	prefix  string
	cl      *kgo.Client // producer and admin
}

// OpenDefinitions connects to the definitions of the replays under
// prefix. Close it.
func OpenDefinitions(brokers []string, prefix string) (*Definitions, error) {
	cl, err := kgo.NewClient(append(eventlog.ClientOpts(brokers, "seqflow-replay-admin"), eventlog.ProducerOpts()...)...)
	if err != nil {
		return nil, fmt.Errorf("create Kafka client: %w", err)
	}
	return &Definitions{brokers: brokers, prefix: prefix, cl: cl}, nil
}

// Close closes the client.
func (d *Definitions) Close() { d.cl.Close() }

// Admin is an admin client on the same connection.
func (d *Definitions) Admin() *kadm.Client { return kadm.NewClient(d.cl) }

func (d *Definitions) topic() string { return d.prefix + TopicDefinitions }

// Ensure creates the definitions topic if it does not exist: one
// partition, compacted, so each name keeps its latest definition forever
// and a deleted name nothing (after the tombstone's retention).
func (d *Definitions) Ensure(ctx context.Context) error {
	return eventlog.EnsureTopics(ctx, kadm.NewClient(d.cl), []eventlog.Spec{{
		Name: d.topic(), Partitions: 1, Configs: map[string]string{"cleanup.policy": "compact"},
	}}, 0)
}

// All returns every defined replay by name. A missing definitions topic
// means none.
func (d *Definitions) All(ctx context.Context) (map[string]*imv1.ReplayDefinition, error) {
	adm := kadm.NewClient(d.cl)
	starts, err := adm.ListStartOffsets(ctx, d.topic())
	if err != nil {
		return nil, fmt.Errorf("list offsets of %s: %w", d.topic(), err)
	}
	ends, err := adm.ListEndOffsets(ctx, d.topic())
	if err != nil {
		return nil, fmt.Errorf("list offsets of %s: %w", d.topic(), err)
	}
	out := map[string]*imv1.ReplayDefinition{}
	s, ok1 := starts.Lookup(d.topic(), 0)
	e, ok2 := ends.Lookup(d.topic(), 0)
	if !ok1 || !ok2 || errors.Is(s.Err, kerr.UnknownTopicOrPartition) {
		return out, nil
	}
	if s.Err != nil || e.Err != nil {
		return nil, fmt.Errorf("list offsets of %s: %w", d.topic(), errors.Join(s.Err, e.Err))
	}
	err = readRange(ctx, d.brokers, d.topic(), map[int32][2]int64{0: {s.Offset, e.Offset}}, func(r *kgo.Record) error {
		name := string(r.Key)
		var def imv1.ReplayDefinition
		if err := proto.Unmarshal(r.Value, &def); err != nil {
			return fmt.Errorf("definition %q at %s/0/%d: %w", name, d.topic(), r.Offset, err)
		}
		if r.Value == nil || def.GetDeleted() {
			delete(out, name)
			return nil
		}
		out[name] = &def
		return nil
	})
	return out, err
}

// Get returns the definition of name, or ErrNotFound.
func (d *Definitions) Get(ctx context.Context, name string) (*imv1.ReplayDefinition, error) {
	all, err := d.All(ctx)
	if err != nil {
		return nil, err
	}
	def, ok := all[name]
	if !ok {
		return nil, fmt.Errorf("replay %s: %w", name, ErrNotFound)
	}
	return def, nil
}

// Put writes def (acks=all, idempotent).
func (d *Definitions) Put(ctx context.Context, def *imv1.ReplayDefinition) error {
	v, err := proto.Marshal(def)
	if err != nil {
		return fmt.Errorf("encode definition: %w", err)
	}
	if err := d.cl.ProduceSync(ctx, &kgo.Record{Topic: d.topic(), Partition: 0, Key: []byte(def.GetName()), Value: v}).FirstErr(); err != nil {
		return fmt.Errorf("write definition of %s: %w", def.GetName(), err)
	}
	return nil
}

// Delete marks name deleted.
func (d *Definitions) Delete(ctx context.Context, name string) error {
	return d.Put(ctx, &imv1.ReplayDefinition{Name: name, Deleted: true})
}

// CreateSpec says what Create makes.
type CreateSpec struct {
	Name    string
	Source  string // the source topic, <prefix>im.sequenced.v1
	Request *imv1.ReplayRequest
	// Retention is the replay topic's retention.ms: how long after they
	// were copied its records are kept (the topic's timestamps are
	// LogAppendTime); <= 0 keeps them forever.
	Retention time.Duration
}

// Create defines the replay and creates its topic, idempotently: when a
// replay of that name exists with the same request, it keeps its
// definition (the same resolved offsets, so a resume copies the same
// range) and only sets the retention; with another request it returns a
// *DefinitionMismatchError. The definition is written before the topic is
// created, so a crash in between leaves a definition whose next Create
// makes the topic. It returns the definition in force.
func (d *Definitions) Create(ctx context.Context, spec CreateSpec) (*imv1.ReplayDefinition, error) {
	if err := CheckName(spec.Name); err != nil {
		return nil, err
	}
	req := normalize(spec.Request)
	if err := d.Ensure(ctx); err != nil {
		return nil, err
	}
	def, err := d.Get(ctx, spec.Name)
	switch {
	case errors.Is(err, ErrNotFound):
		adm := kadm.NewClient(d.cl)
		ranges, err := Resolve(ctx, adm, spec.Source, req)
		if err != nil {
			return nil, err
		}
		def = &imv1.ReplayDefinition{
			Name: spec.Name, SourceTopic: spec.Source, ReplayTopic: TopicName(d.prefix, spec.Name),
			Request: req, Ranges: ranges, CreatedTsMs: time.Now().UnixMilli(),
		}
		if err := d.Put(ctx, def); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	case !proto.Equal(def.GetRequest(), req) || def.GetSourceTopic() != spec.Source:
		return nil, &DefinitionMismatchError{Name: spec.Name, Have: Describe(def.GetRequest()), Want: Describe(req)}
	}
	if err := ensureReplayTopic(ctx, kadm.NewClient(d.cl), def, spec.Retention); err != nil {
		return nil, err
	}
	return def, nil
}

// retentionMS is the retention.ms value of a retention.
func retentionMS(r time.Duration) string {
	if r <= 0 {
		return "-1"
	}
	return strconv.FormatInt(r.Milliseconds(), 10)
}

// ensureReplayTopic creates def's replay topic with as many partitions as
// the source, or sets the retention of the existing one (and checks its
// partition count).
func ensureReplayTopic(ctx context.Context, adm *kadm.Client, def *imv1.ReplayDefinition, retention time.Duration) error {
	topic := def.GetReplayTopic()
	spec := eventlog.Spec{Name: topic, Partitions: int32(len(def.GetRanges())), Configs: map[string]string{
		"retention.ms": retentionMS(retention),
		// Retention counts from the copy, not from the events' own (old)
		// times: with CreateTime a replay of last year's events would be
		// deleted as soon as it was written.
		"message.timestamp.type": "LogAppendTime",
	}}
	if err := eventlog.EnsureTopics(ctx, adm, []eventlog.Spec{spec}, 0); err != nil {
		return err
	}
	resp, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr(retentionMS(retention))}}, topic)
	if err == nil {
		_, err = resp.On(topic, nil)
	}
	if err != nil {
		return fmt.Errorf("set retention of %s: %w", topic, err)
	}
	return nil
}

// DeleteReplay deletes the replay topic of name and then its definition.
// A missing topic is no error (a crash between the two steps).
func (d *Definitions) DeleteReplay(ctx context.Context, name string) error {
	if _, err := d.Get(ctx, name); err != nil {
		return err
	}
	topic := TopicName(d.prefix, name)
	resp, err := kadm.NewClient(d.cl).DeleteTopics(ctx, topic)
	if err == nil {
		var r kadm.DeleteTopicResponse
		if r, err = resp.On(topic, nil); err == nil {
			err = r.Err
		}
	}
	if err != nil && !errors.Is(err, kerr.UnknownTopicOrPartition) {
		return fmt.Errorf("delete topic %s: %w", topic, err)
	}
	// Deletion is asynchronous; wait until the topic is gone, so a create
	// of the same name right after makes a new topic.
	for {
		details, err := kadm.NewClient(d.cl).ListTopics(ctx, topic)
		if err != nil {
			return fmt.Errorf("describe topic %s: %w", topic, err)
		}
		if dt, ok := details[topic]; !ok || errors.Is(dt.Err, kerr.UnknownTopicOrPartition) {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return d.Delete(ctx, name)
}
