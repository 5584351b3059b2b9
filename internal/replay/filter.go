package replay

import (
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// filter says whether an event of the range is copied: its session (the
// record key, which is the session ID on im.sequenced.v1) and its sender
// must be among those asked for, when asked.
type filter struct {
	sessions, senders map[string]bool
}

func newFilter(req *imv1.ReplayRequest) *filter {
	set := func(s []string) map[string]bool {
		if len(s) == 0 {
			return nil
		}
		m := make(map[string]bool, len(s))
		for _, v := range s {
			m[v] = true
		}
		return m
	}
	return &filter{sessions: set(req.GetSessionIds()), senders: set(req.GetSenderUserIds())}
}

// match reports whether r is copied. An event that does not decode has no
// sender, so a sender filter leaves it out.
func (f *filter) match(r *kgo.Record) bool {
	if f.sessions != nil && !f.sessions[string(r.Key)] {
		return false
	}
	if f.senders != nil {
		var ev imv1.SequencedEvent
		if ev.UnmarshalVT(r.Value) != nil {
			return false
		}
		return f.senders[ev.GetSenderUserId()]
	}
	return true
}
