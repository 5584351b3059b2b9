package store

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// Source says which topic a record came from.
type Source int

const (
	// FromSequenced: im.sequenced.v1, values are SequencedEvent.
	FromSequenced Source = iota
	// FromReceipts: im.receipts.v1, values are ReadReceipt or
	// DeliveryReceipt as the seqflow-event-type header says.
	FromReceipts
)

// Item is one decoded record: exactly one field is set.
type Item struct {
	Row      *Row
	Read     *ReadCursor
	Delivery *DeliveryCursor
}

// Decode turns a record value into what the store keeps of it. eventType is
// the record's seqflow-event-type header. An error is an
// *InvalidEventError: the record can never be stored.
func Decode(src Source, eventType string, value []byte, partition int32, offset int64) (Item, error) {
	switch src {
	case FromSequenced:
		var ev imv1.SequencedEvent
		if err := proto.Unmarshal(value, &ev); err != nil {
			return Item{}, invalid("not a seqflow.im.v1.SequencedEvent: %v", err)
		}
		r, err := RowOf(&ev, partition, offset)
		if err != nil {
			return Item{}, err
		}
		return Item{Row: &r}, nil
	case FromReceipts:
		switch eventType {
		case "read_receipt":
			var m imv1.ReadReceipt
			if err := proto.Unmarshal(value, &m); err != nil {
				return Item{}, invalid("not a seqflow.im.v1.ReadReceipt: %v", err)
			}
			c, err := ReadOf(&m)
			if err != nil {
				return Item{}, err
			}
			return Item{Read: &c}, nil
		case "delivery_receipt":
			var m imv1.DeliveryReceipt
			if err := proto.Unmarshal(value, &m); err != nil {
				return Item{}, invalid("not a seqflow.im.v1.DeliveryReceipt: %v", err)
			}
			c, err := DeliveryOf(&m)
			if err != nil {
				return Item{}, err
			}
			return Item{Delivery: &c}, nil
		}
		return Item{}, invalid("receipt with event type %q (want read_receipt or delivery_receipt)", eventType)
	}
	return Item{}, invalid("unknown source %d", src)
}

// Add appends it to b and returns the index of its row in b.Rows, or -1.
func (b *Batch) Add(it Item) int {
	switch {
	case it.Row != nil:
		b.Rows = append(b.Rows, *it.Row)
		return len(b.Rows) - 1
	case it.Read != nil:
		b.Reads = append(b.Reads, *it.Read)
	case it.Delivery != nil:
		b.Deliveries = append(b.Deliveries, *it.Delivery)
	}
	return -1
}

// String names the source for logs and metrics.
func (s Source) String() string {
	switch s {
	case FromSequenced:
		return "sequenced"
	case FromReceipts:
		return "receipts"
	}
	return fmt.Sprintf("source(%d)", int(s))
}
