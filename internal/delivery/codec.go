package delivery

import (
	"fmt"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// DefaultMaxFrameBytes bounds one encoded batch on the wire. Larger batches
// are split by items: a Redis subscriber whose output buffer passes
// client-output-buffer-limit (pubsub 8 MB soft) is disconnected, and a
// stream peer should not have to buffer unbounded frames.
const DefaultMaxFrameBytes = 1 << 20

// encodeBatch marshals b into frames of at most maxBytes each, splitting
// its items in halves until every part fits. Every part repeats
// gateway_id, sender and sent_ts_ms; items keep their order across the parts.
//
// It uses the generated MarshalVT (about half of proto.Marshal's CPU),
// which skips proto.Marshal's UTF-8 check of strings: a batch is built from
// sequenced events that the pusher decoded with proto.Unmarshal, which
// made that check.
func encodeBatch(b *imv1.PushBatch, maxBytes int) ([][]byte, error) {
	v, err := b.MarshalVT()
	if err != nil {
		return nil, fmt.Errorf("marshal push batch: %w", err)
	}
	if len(v) <= maxBytes {
		return [][]byte{v}, nil
	}
	if len(b.Items) <= 1 {
		return nil, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, len(v), maxBytes)
	}
	half := len(b.Items) / 2
	var out [][]byte
	for _, items := range [][]*imv1.PushItem{b.Items[:half], b.Items[half:]} {
		part, err := encodeBatch(&imv1.PushBatch{GatewayId: b.GatewayId, Sender: b.Sender, SentTsMs: b.SentTsMs, Items: items}, maxBytes)
		if err != nil {
			return nil, err
		}
		out = append(out, part...)
	}
	return out, nil
}

// decodeBatch parses one frame received for gatewayID. A frame that is not
// a PushBatch, or is addressed to another gateway, is ErrBadBatch.
//
// It uses the generated UnmarshalVT, which does not check that strings are
// UTF-8 as proto.Unmarshal does: frames come from a pusher, which encodes
// only events proto.Unmarshal accepted, and the gateway's JSON writer turns
// invalid UTF-8 into U+FFFD (as encoding/json does) in any case.
func decodeBatch(data []byte, gatewayID string) (*imv1.PushBatch, error) {
	var b imv1.PushBatch
	if err := b.UnmarshalVT(data); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadBatch, err)
	}
	if b.GatewayId != gatewayID {
		return nil, fmt.Errorf("%w: %q, not %q", errWrongGateway, b.GatewayId, gatewayID)
	}
	for i, it := range b.Items {
		if it.GetItem() == nil {
			return nil, fmt.Errorf("%w: item %d has neither event nor duplicate", ErrBadBatch, i)
		}
	}
	return &b, nil
}
