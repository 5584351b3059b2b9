package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/seqflow/seqflow/internal/wire"
)

// outbox is a file of commands not yet answered, so they survive a client
// restart and are resent with their original client_msg_id. The file is
// JSON lines: {"add":<frame>} when a command is posted (fsynced before the
// command is sent) and {"done":"<client_msg_id>"} when it is answered
// (not fsynced: a lost "done" only makes the next client resend a command
// the gateway answers as a duplicate). A torn last line, from a crash
// mid-write, is ignored. The file is compacted when opened and when done
// records outnumber live ones.
//
// One outbox file belongs to one client (one user and device) at a time.
type outbox struct {
	mu    sync.Mutex
	path  string
	f     *os.File
	live  map[string]*wire.ClientFrame
	order []string // client_msg_ids in posting order, done ones included until compaction
	dones int
}

type outboxRecord struct {
	Add  *wire.ClientFrame `json:"add,omitempty"`
	Done string            `json:"done,omitempty"`
}

// openOutbox reads path (creating it when missing) and returns the outbox
// with the commands still pending, in the order they were posted.
func openOutbox(path string) (*outbox, []*wire.ClientFrame, error) {
	o := &outbox{path: path, live: map[string]*wire.ClientFrame{}}
	b, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("read outbox: %w", err)
	}
	lines := bytes.Split(b, []byte("\n"))
	for i, line := range lines {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var r outboxRecord
		if err := json.Unmarshal(line, &r); err != nil {
			if i == len(lines)-1 {
				break // torn last line: the crash came before its newline
			}
			return nil, nil, fmt.Errorf("outbox %s line %d: %w", path, i+1, err)
		}
		o.apply(r)
	}
	if err := o.compact(); err != nil {
		return nil, nil, err
	}
	return o, o.pending(), nil
}

// apply folds one record into the live set.
func (o *outbox) apply(r outboxRecord) {
	switch {
	case r.Add != nil && r.Add.ClientMsgID != "":
		if _, ok := o.live[r.Add.ClientMsgID]; !ok {
			o.order = append(o.order, r.Add.ClientMsgID)
		}
		o.live[r.Add.ClientMsgID] = r.Add
	case r.Done != "":
		if _, ok := o.live[r.Done]; ok {
			delete(o.live, r.Done)
			o.dones++
		}
	}
}

func (o *outbox) pending() []*wire.ClientFrame {
	var out []*wire.ClientFrame
	for _, id := range o.order {
		if f, ok := o.live[id]; ok {
			out = append(out, f)
		}
	}
	return out
}

// compact rewrites the file with the live commands only (write a temporary
// file, fsync, rename, fsync the directory) and reopens it for appending.
func (o *outbox) compact() error {
	if o.f != nil {
		_ = o.f.Close()
		o.f = nil
	}
	var buf bytes.Buffer
	live := o.pending()
	o.order = o.order[:0]
	for _, f := range live {
		b, err := json.Marshal(outboxRecord{Add: f})
		if err != nil {
			return fmt.Errorf("encode outbox record: %w", err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
		o.order = append(o.order, f.ClientMsgID)
	}
	o.dones = 0
	tmp := o.path + ".tmp"
	if err := writeFileSync(tmp, buf.Bytes()); err != nil {
		return err
	}
	if err := os.Rename(tmp, o.path); err != nil {
		return fmt.Errorf("replace outbox: %w", err)
	}
	if d, err := os.Open(filepath.Dir(o.path)); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
	f, err := os.OpenFile(o.path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open outbox: %w", err)
	}
	o.f = f
	return nil
}

func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write outbox: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write outbox: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("sync outbox: %w", err)
	}
	return f.Close()
}

// add records a command durably (fsync) before it is first sent.
func (o *outbox) add(f *wire.ClientFrame) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err := o.append(outboxRecord{Add: f}, true); err != nil {
		return err
	}
	o.apply(outboxRecord{Add: f})
	return nil
}

// done records that a command was answered (ok ACK or final error).
func (o *outbox) done(clientMsgID string) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.live[clientMsgID]; !ok {
		return nil
	}
	if err := o.append(outboxRecord{Done: clientMsgID}, false); err != nil {
		return err
	}
	o.apply(outboxRecord{Done: clientMsgID})
	if o.dones > 1024 && o.dones > 2*len(o.live) {
		return o.compact()
	}
	return nil
}

func (o *outbox) append(r outboxRecord, sync bool) error {
	if o.f == nil {
		return ErrClosed
	}
	b, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode outbox record: %w", err)
	}
	if _, err := o.f.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("append to outbox: %w", err)
	}
	if sync {
		if err := o.f.Sync(); err != nil {
			return fmt.Errorf("sync outbox: %w", err)
		}
	}
	return nil
}

func (o *outbox) close() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.f == nil {
		return nil
	}
	err := o.f.Close()
	o.f = nil
	return err
}
