package export

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/schemas"
)

// partition is the export's state of one assigned Kafka partition. Only
// one goroutine uses it at a time (under Exporter.mu).
type partition struct {
	id       int32
	w        *parquet.GenericWriter[Row] // reused from file to file
	cur      *openFile                   // nil between files
	buf      []Row                       // rows not yet handed to w
	next     int64                       // offset after the last record read (or resumed from)
	done     int64                       // offset after the last event in a committed file
	reported int64                       // done as of the last offset commit
}

// openFile is the file a partition is writing.
type openFile struct {
	file   File // Last grows as events come
	up     Upload
	out    *countingWriter
	rows   int
	counts map[string]int64 // rows by event type
	opened time.Time
}

// bufRows is how many rows are handed to the Parquet writer at once.
const bufRows = 1024

// write appends the partition's records, in offset order, to its files,
// committing a file when it is full or the next event falls in another
// hour.
func (e *Exporter) write(ctx context.Context, p *partition, recs []*kgo.Record) error {
	for _, r := range recs {
		if r.Offset < p.next {
			continue // in a file already
		}
		if r.Attrs.IsControl() {
			p.next = r.Offset + 1 // a transaction marker: no event
			continue
		}
		row := rowOf(r)
		hour := HourOf(row.ServerTsMs)
		if p.cur != nil && (!p.cur.file.Hour.Equal(hour) || p.cur.rows >= e.cfg.MaxRows) {
			if err := e.finish(ctx, p); err != nil {
				return err
			}
		}
		if p.cur == nil {
			if err := e.open(ctx, p, hour, r.Offset); err != nil {
				return err
			}
		}
		p.buf = append(p.buf, row)
		p.cur.rows++
		p.cur.counts[row.EventType]++
		p.cur.file.Last = r.Offset
		p.next = r.Offset + 1
		if len(p.buf) >= bufRows {
			if err := p.flush(); err != nil {
				return err
			}
		}
		if e.cfg.DebugRowDelay > 0 {
			time.Sleep(e.cfg.DebugRowDelay)
		}
	}
	return p.flush()
}

func (e *Exporter) open(ctx context.Context, p *partition, hour time.Time, first int64) error {
	up, err := e.cfg.Store.Create(ctx, partTag(p.id))
	if err != nil {
		return fmt.Errorf("start file of partition %d: %w", p.id, err)
	}
	out := &countingWriter{w: up}
	p.w.Reset(out)
	p.cur = &openFile{
		file:   File{Partition: p.id, First: first, Last: first, Hour: hour},
		up:     up,
		out:    out,
		counts: map[string]int64{},
		opened: time.Now(),
	}
	return nil
}

// finish commits the open file: the footer, then the store's commit
// (fsync and rename, or the PUT). Only then does p.done move past it, so
// the offset commit that follows never passes an event not in a visible
// file.
func (e *Exporter) finish(ctx context.Context, p *partition) error {
	if err := p.flush(); err != nil {
		p.abort(e.log)
		return err
	}
	f := p.cur.file
	start := time.Now()
	p.w.SetKeyValueMetadata("seqflow.topic", e.cfg.Topic)
	p.w.SetKeyValueMetadata("seqflow.partition", strconv.Itoa(int(f.Partition)))
	p.w.SetKeyValueMetadata("seqflow.first_offset", strconv.FormatInt(f.First, 10))
	p.w.SetKeyValueMetadata("seqflow.last_offset", strconv.FormatInt(f.Last, 10))
	p.w.SetKeyValueMetadata("seqflow.schema", "seqflow.im.v1.SequencedEvent "+schemas.SchemaVersion)
	if err := p.w.Close(); err != nil {
		p.abort(e.log)
		return fmt.Errorf("write footer of %s: %w", f.Path(), err)
	}
	if err := p.cur.up.Commit(ctx, f.Path()); err != nil {
		p.abort(e.log)
		return fmt.Errorf("commit %s: %w", f.Path(), err)
	}
	e.m.commitSeconds.Observe(time.Since(start).Seconds())
	e.m.files.Inc()
	e.m.bytes.Add(float64(p.cur.out.n))
	for typ, n := range p.cur.counts {
		e.m.events.WithLabelValues(typ).Add(float64(n))
	}
	e.events.Add(int64(p.cur.rows))
	e.files.Add(1)
	e.log.Debug("file committed", "file", f.Path(), "events", p.cur.rows, "bytes", p.cur.out.n)
	p.done = f.Last + 1
	p.cur = nil
	return nil
}

// flush hands the buffered rows to the Parquet writer.
func (p *partition) flush() error {
	if len(p.buf) == 0 {
		return nil
	}
	_, err := p.w.Write(p.buf)
	clear(p.buf) // drop the references to the bodies
	p.buf = p.buf[:0]
	if err != nil {
		return fmt.Errorf("write rows of partition %d: %w", p.id, err)
	}
	return nil
}

// abort drops the open file, if any. The events in it are read again by
// whoever exports the partition next (it resumes after the last
// committed file).
func (p *partition) abort(log *slog.Logger) {
	clear(p.buf)
	p.buf = p.buf[:0]
	if p.cur == nil {
		return
	}
	if err := p.cur.up.Abort(); err != nil {
		log.Warn("drop unfinished file", "partition", p.id, "err", err)
	}
	p.w.Reset(nil)
	p.cur = nil
	p.next = p.done
}

// partTag is the tag of a partition's uploads, the prefix of its files'
// base names.
func partTag(part int32) string { return fmt.Sprintf("part-p%03d-", part) }

type countingWriter struct {
	w interface{ Write([]byte) (int, error) }
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}
