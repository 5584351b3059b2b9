package rebuild

import (
	"slices"
	"sort"

	"github.com/seqflow/seqflow/internal/store"
)

// TakenSession is a session clients took without creating it: a join or
// an add reached the log before any session_create of the session, which
// internal/groups has refused since (SESSION_NOT_FOUND). Its takers stay
// listed as members until an operator hands it back with `seqflow
// reclaim`.
type TakenSession struct {
	SessionID string
	FirstSeq  int64    // the first event that listed a taker
	Users     []string // the takers still listed, sorted
}

// Taken returns the sessions of rows (in log order per partition, as
// ReadLog gives them) whose members came from a join or an add with no
// session_create before it, and still list any of them: a removal (the
// taker's leave, an erasure or an operator's reclaim) takes a user off the
// list. Sorted by session ID.
func Taken(rows []store.Row) []TakenSession {
	created := map[string]bool{}
	taken := map[string]*TakenSession{}
	for i := range rows {
		r := &rows[i]
		switch {
		case r.Kind == store.KindSessionCreate:
			created[r.SessionID] = true
		case created[r.SessionID] || r.MemberOp == "":
		case r.MemberOp == store.OpAdd && (r.Kind == store.KindMembership || r.Kind == store.KindGroup):
			t := taken[r.SessionID]
			if t == nil {
				t = &TakenSession{SessionID: r.SessionID, FirstSeq: r.Seq}
				taken[r.SessionID] = t
			}
			for _, u := range r.MemberIDs {
				if !slices.Contains(t.Users, u) {
					t.Users = append(t.Users, u)
				}
			}
		case r.MemberOp == store.OpRemove:
			if t := taken[r.SessionID]; t != nil {
				t.Users = slices.DeleteFunc(t.Users, func(u string) bool { return slices.Contains(r.MemberIDs, u) })
			}
		}
	}
	var out []TakenSession
	for _, t := range taken {
		if len(t.Users) > 0 {
			slices.Sort(t.Users)
			out = append(out, *t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].SessionID < out[j].SessionID })
	return out
}
