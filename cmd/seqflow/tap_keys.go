package main

import (
	"context"
	"fmt"
	"github.com/twmb/franz-go/pkg/kgo"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/seqflow/seqflow/internal/keystore"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// tapKeys opens sealed bodies for `seqflow tap -keys` (docs/erasure.md):
// a body whose key exists is printed in plaintext, one whose key was
// destroyed as the text "[erased]"; key_id stays, so a reader sees the
// body was sealed. Without -keys a sealed body prints as it is in Kafka
// (ciphertext, in base64).
type tapKeys struct {
	ks    *keystore.Store
	close func()
}

// openTapKeys connects to the key store of SEQFLOW_PG_URL with SEQFLOW_KEK.
func openTapKeys(ctx context.Context) (*tapKeys, error) {
	ks, closeKS, err := openKeyStore(ctx)
	if err != nil {
		return nil, fmt.Errorf("-keys: %w", err)
	}
	return &tapKeys{ks: ks, close: closeKS}, nil
}

func (k *tapKeys) Close() { k.close() }

// open returns r with its body opened, or r itself when it holds none
// sealed. An error: the key store did not answer.
func (k *tapKeys) open(ctx context.Context, r *kgo.Record, mt protoreflect.MessageType) (*kgo.Record, error) {
	if mt == nil {
		return r, nil
	}
	var (
		m               proto.Message
		c               *imv1.MessageContent
		session, sender string
	)
	switch mt.Descriptor().FullName() {
	case "seqflow.im.v1.SequencedEvent":
		ev := &imv1.SequencedEvent{}
		if proto.Unmarshal(r.Value, ev) != nil {
			return r, nil // the encoder says why
		}
		m, session, sender = ev, ev.SessionId, ev.SenderUserId
		c = ev.GetMessage()
		if c == nil {
			c = ev.GetEdit().GetContent()
		}
	case "seqflow.im.v1.Uplink":
		up := &imv1.Uplink{}
		if proto.Unmarshal(r.Value, up) != nil {
			return r, nil
		}
		m, session, sender = up, up.SessionId, up.SenderUserId
		c = up.GetMessage()
		if c == nil {
			c = up.GetEdit().GetContent()
		}
	default:
		return r, nil
	}
	if c.GetKeyId() == 0 {
		return r, nil
	}
	plain, err := k.ks.OpenBody(ctx, c.KeyId, c.Body, session, sender)
	switch {
	case keystore.Erased(err):
		c.Body = []byte("[erased]")
	case err != nil:
		return nil, fmt.Errorf("open the body of %s/%d@%d: %w", r.Topic, r.Partition, r.Offset, err)
	default:
		c.Body = plain
	}
	v, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	out := *r
	out.Value = v
	return &out, nil
}
