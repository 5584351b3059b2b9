package eventlog

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TxnPoll is how a consume-transform-produce loop in transactions (the
// sequencer; the benchmark's floor) takes its next batch, so that a
// transaction carries what arrived while the previous one ran and the
// loop commits at most one transaction per Floor.
//
// franz-go keeps one fetch per broker buffered and sends the next one only
// when that one is taken, so a fetch buffered while the previous
// transaction ran was answered when its first records arrived: it holds
// the start of that transaction's time, and whatever came after waits at
// the broker for a whole transaction more. When PollRecords hands over
// such a buffered fetch without waiting, the fetch that taking it started
// is waited for up to MergeWait and joined to the batch: the records that
// arrived during the previous transaction go into this one.
type TxnPoll struct {
	MaxRecords int           // records per batch at most
	MergeWait  time.Duration // 0: no merge
	// Floor is the least time between two batches' polls (0: none); see
	// gatherToFloor.
	Floor time.Duration
	// OnMerge, when set, is told after each merge poll whether it found
	// records.
	OnMerge func(merged bool)
}

// Poll returns the next batch and when it was complete. first bounds the
// first poll (an idle loop's own timeout; ctx when none), ctx the rest;
// prev is when the previous batch was complete (zero: none yet).
func (p TxnPoll) Poll(ctx, first context.Context, sess *kgo.GroupTransactSession, prev time.Time) (kgo.Fetches, time.Time) {
	start := time.Now()
	fetches := sess.PollRecords(first, p.MaxRecords)
	polled := time.Now()
	n := fetches.NumRecords()
	if ctx.Err() != nil || n == 0 || n >= p.MaxRecords {
		return fetches, polled
	}
	if p.MergeWait > 0 && polled.Sub(start) <= bufferedPoll {
		mctx, cancel := context.WithTimeout(ctx, p.MergeWait)
		more := sess.PollRecords(mctx, p.MaxRecords-n)
		cancel()
		if p.OnMerge != nil {
			p.OnMerge(more.NumRecords() > 0)
		}
		if more.NumRecords() > 0 {
			fetches, polled, n = MergeFetches(fetches, more), time.Now(), n+more.NumRecords()
		}
	}
	return p.gatherToFloor(ctx, sess, prev, fetches, polled, n)
}

// gatherToFloor waits until Floor has passed since the previous batch's
// poll (prev), then takes the records that came meanwhile and joins them
// to fetches. It does not poll through the wait: the broker answers a
// fetch as soon as records arrive, so polling on would take a fetch (a
// broker request) per uplink produce. Instead the fetch buffered during
// the wait (answered with the first records that came) is taken at the
// floor, and the fetch that taking it sends, which the broker answers at
// once with the rest, is waited for up to floorFetchWait.
func (p TxnPoll) gatherToFloor(ctx context.Context, sess *kgo.GroupTransactSession, prev time.Time, fetches kgo.Fetches, polled time.Time, n int) (kgo.Fetches, time.Time) {
	if p.Floor <= 0 || prev.IsZero() || n >= p.MaxRecords {
		return fetches, polled
	}
	wait := time.Until(prev.Add(p.Floor))
	if wait <= 0 {
		return fetches, polled
	}
	t := time.NewTimer(wait)
	select {
	case <-ctx.Done():
		t.Stop()
		return fetches, polled
	case <-t.C:
	}
	for range 2 { // the buffered fetch, then the one its taking sends
		start := time.Now()
		fctx, cancel := context.WithTimeout(ctx, floorFetchWait)
		more := sess.PollRecords(fctx, p.MaxRecords-n)
		cancel()
		// merged even without records: an error other than the wait's
		// own context error must reach the caller's checks.
		fetches = MergeFetches(fetches, more)
		if ctx.Err() != nil || more.NumRecords() == 0 {
			break
		}
		n += more.NumRecords()
		polled = time.Now()
		if n >= p.MaxRecords || polled.Sub(start) > bufferedPoll {
			break // that was the fresh fetch
		}
	}
	return fetches, polled
}

// floorFetchWait bounds each poll of gatherToFloor: a buffered fetch is
// handed over at once, and the broker answers the next one within a round
// trip when records wait for it. Records it misses go into the next
// batch.
const floorFetchWait = 2 * time.Millisecond

// bufferedPoll is how fast a PollRecords that found a fetch already
// buffered returns, at most.
const bufferedPoll = time.Millisecond

// MergeFetches joins b after a into one fetch in which each topic
// partition appears once, its records in offset order (b's records of a
// partition follow a's), so a partition is one partBatch however many
// fetches brought it. Context errors of b (its wait ran out) are dropped.
func MergeFetches(a, b kgo.Fetches) kgo.Fetches {
	type tp struct {
		t string
		p int32
	}
	var order []tp
	parts := map[tp]*kgo.FetchPartition{}
	add := func(fs kgo.Fetches, late bool) {
		fs.EachPartition(func(fp kgo.FetchTopicPartition) {
			if late && len(fp.Records) == 0 && IsPollDone(fp.Err) {
				return
			}
			k := tp{fp.Topic, fp.Partition}
			have := parts[k]
			if have == nil {
				c := fp.FetchPartition
				c.Records = append([]*kgo.Record(nil), fp.Records...)
				parts[k] = &c
				order = append(order, k)
				return
			}
			have.Records = append(have.Records, fp.Records...)
			have.HighWatermark, have.LastStableOffset, have.LogStartOffset = fp.HighWatermark, fp.LastStableOffset, fp.LogStartOffset
			if fp.Err != nil {
				have.Err = fp.Err
			}
		})
	}
	add(a, false)
	add(b, true)
	var f kgo.Fetch
	topic := map[string]int{}
	for _, k := range order {
		i, ok := topic[k.t]
		if !ok {
			i = len(f.Topics)
			topic[k.t] = i
			f.Topics = append(f.Topics, kgo.FetchTopic{Topic: k.t})
		}
		f.Topics[i].Partitions = append(f.Topics[i].Partitions, *parts[k])
	}
	return kgo.Fetches{f}
}
