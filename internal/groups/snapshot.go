package groups

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// Snapshots. A partition's state can be saved to PostgreSQL with the
// offset of im.sequenced.v1 it holds for (every event before it applied),
// so that whoever rebuilds it next loads the snapshot and reads only the
// log after that offset. Only the sessions changed since the last save are
// written (TakeDirty); the others' stored states still hold, since nothing
// changed them. A save never moves a partition's offset backwards, so a
// slow writer cannot replace a newer snapshot with an older one.

// ErrStaleSnapshot: a newer snapshot of the partition is stored already.
var ErrStaleSnapshot = errors.New("a newer group snapshot is stored")

// Dirty marks sessions whose state changed since the last TakeDirty.
func (p *Partition) markDirty(id string) {
	if p.dirty == nil {
		p.dirty = map[string]struct{}{}
	}
	p.dirty[id] = struct{}{}
}

// TakeDirty returns the states of the sessions changed since the last
// call (copies, safe to use on another goroutine) and forgets them. A
// caller whose save fails hands the IDs back with MarkDirty.
func (p *Partition) TakeDirty() map[string]*imv1.GroupState {
	out := make(map[string]*imv1.GroupState, len(p.dirty))
	for id := range p.dirty {
		if s := p.sessions[id]; s != nil {
			out[id] = s.state()
		}
	}
	clear(p.dirty)
	return out
}

// MarkDirty marks sessions to be saved again.
func (p *Partition) MarkDirty(ids []string) {
	for _, id := range ids {
		p.markDirty(id)
	}
}

// Dirty returns how many sessions changed since the last TakeDirty.
func (p *Partition) Dirty() int { return len(p.dirty) }

// state encodes s.
func (s *Session) state() *imv1.GroupState {
	st := &imv1.GroupState{Kind: s.Kind, Title: s.Title, Description: s.Description, AvatarUrl: s.AvatarURL,
		JoinRule: s.JoinRule, MembersCanInvite: s.MembersCanInvite, InviteCodeSha256: s.InviteCodeSHA256,
		MuteAll: s.MuteAll, Dissolved: s.Dissolved, Owner: s.Owner, Members: make([]*imv1.GroupMember, 0, len(s.Members))}
	for u, m := range s.Members {
		st.Members = append(st.Members, &imv1.GroupMember{UserId: u, Role: m.Role, MutedUntilMs: m.MutedUntilMs})
	}
	slices.SortFunc(st.Members, func(a, b *imv1.GroupMember) int {
		if a.UserId < b.UserId {
			return -1
		}
		if a.UserId > b.UserId {
			return 1
		}
		return 0
	})
	return st
}

func sessionOf(st *imv1.GroupState) *Session {
	s := &Session{Kind: st.Kind, Title: st.Title, Description: st.Description, AvatarURL: st.AvatarUrl,
		JoinRule: st.JoinRule, MembersCanInvite: st.MembersCanInvite, InviteCodeSHA256: st.InviteCodeSha256,
		MuteAll: st.MuteAll, Dissolved: st.Dissolved, Owner: st.Owner, Members: make(map[string]Member, len(st.Members))}
	for _, m := range st.Members {
		s.Members[m.UserId] = Member{Role: m.Role, MutedUntilMs: m.MutedUntilMs}
	}
	return s
}

// SnapshotStore keeps partition snapshots in PostgreSQL (migration 0005).
type SnapshotStore struct{ pool *pgxpool.Pool }

// NewSnapshotStore returns a store on pool.
func NewSnapshotStore(pool *pgxpool.Pool) *SnapshotStore { return &SnapshotStore{pool: pool} }

// Save stores states (sessions changed since the last save) and moves the
// partition's snapshot to nextOffset, in one transaction. It fails with
// ErrStaleSnapshot, storing nothing, when a snapshot at or past
// nextOffset is stored already.
func (s *SnapshotStore) Save(ctx context.Context, topic string, partition int32, nextOffset int64, states map[string]*imv1.GroupState) error {
	return pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// The partition row is locked first: concurrent savers of one
		// partition take turns, and the older one finds the newer offset.
		tag, err := tx.Exec(ctx, `INSERT INTO group_snapshots AS g (topic, partition, next_offset, sessions) VALUES ($1, $2, $3, 0)
			ON CONFLICT (topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset, taken_at = now()
			WHERE g.next_offset < EXCLUDED.next_offset`, topic, partition, nextOffset)
		if err != nil {
			return fmt.Errorf("save group snapshot of %s/%d: %w", topic, partition, err)
		}
		if tag.RowsAffected() == 0 {
			return ErrStaleSnapshot
		}
		ids := make([]string, 0, len(states))
		values := make([][]byte, 0, len(states))
		for id, st := range states {
			b, err := proto.Marshal(st)
			if err != nil {
				return fmt.Errorf("encode group state of %s: %w", id, err)
			}
			ids, values = append(ids, id), append(values, b)
		}
		if len(ids) > 0 {
			if _, err := tx.Exec(ctx, `INSERT INTO group_snapshot_sessions (topic, partition, session_id, state)
				SELECT $1, $2, id, v FROM unnest($3::text[], $4::bytea[]) AS t(id, v) ORDER BY id
				ON CONFLICT (topic, partition, session_id) DO UPDATE SET state = EXCLUDED.state`, topic, partition, ids, values); err != nil {
				return fmt.Errorf("save group states of %s/%d: %w", topic, partition, err)
			}
		}
		_, err = tx.Exec(ctx, `UPDATE group_snapshots SET sessions = (SELECT count(*) FROM group_snapshot_sessions
			WHERE topic = $1 AND partition = $2) WHERE topic = $1 AND partition = $2`, topic, partition)
		return err
	})
}

// Load returns the partition's snapshot: the state of its sessions and
// the offset to read the log from, read in one consistent snapshot of
// the database. found is false when none is stored.
func (s *SnapshotStore) Load(ctx context.Context, topic string, partition int32, maxMembers int) (p *Partition, nextOffset int64, found bool, err error) {
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT next_offset FROM group_snapshots WHERE topic = $1 AND partition = $2`, topic, partition).Scan(&nextOffset)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		found = true
		p = NewPartition(maxMembers)
		rows, err := tx.Query(ctx, `SELECT session_id, state FROM group_snapshot_sessions WHERE topic = $1 AND partition = $2`, topic, partition)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id string
			var b []byte
			if err := rows.Scan(&id, &b); err != nil {
				return err
			}
			var st imv1.GroupState
			if err := proto.Unmarshal(b, &st); err != nil {
				return fmt.Errorf("group state of %s does not decode: %w", id, err)
			}
			p.sessions[id] = sessionOf(&st)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, 0, false, fmt.Errorf("load group snapshot of %s/%d: %w", topic, partition, err)
	}
	return p, nextOffset, found, nil
}
