package keystore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// BenchmarkKeyGranularity measures the two key granularities of
// docs/erasure.md against the stack's PostgreSQL, per message:
//
//   - period: the built one, a key per sender × session × key period; a
//     message seals and opens with a cached key;
//   - message: a key per message, which would make a recall shred the
//     log's copy at once; every send makes a key (a PostgreSQL
//     transaction, fsync'd) and every gateway that pushes or syncs the
//     message fetches that key (a query), as no cache can hold it ahead.
//
// go test ./internal/keystore -run '^$' -bench KeyGranularity -benchtime 2000x
func BenchmarkKeyGranularity(b *testing.B) {
	ctx := context.Background()
	p, kek := pool(b), newKEK(b)
	for _, g := range []string{"period", "message"} {
		b.Run("seal+open/"+g, func(b *testing.B) {
			sealer := open(b, p, kek, Options{CacheTTL: time.Hour})
			opener := open(b, p, kek, Options{CacheTTL: time.Hour})
			sender, sess := id("bench"), id("s")
			body := make([]byte, 200)
			// The period key exists and is cached, as after a session's
			// first message.
			warm := &imv1.MessageContent{Type: "text", Body: body}
			if err := sealer.SealContent(ctx, sess, sender, warm); err != nil {
				b.Fatal(err)
			}
			if _, err := opener.OpenBody(ctx, warm.KeyId, warm.Body, sess, sender); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := range b.N {
				scope := sess
				if g == "message" {
					scope = fmt.Sprintf("%s/%d", sess, i) // a slot of its own: a new key
				}
				c := &imv1.MessageContent{Type: "text", Body: body}
				if err := sealer.SealContent(ctx, scope, sender, c); err != nil {
					b.Fatal(err)
				}
				if _, err := opener.OpenBody(ctx, c.KeyId, c.Body, scope, sender); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
