package logcheck

import (
	"bytes"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// DeadLetterDiff says how dl fails to carry rec byte for byte: its key,
// value, headers (in order) and timestamp. Empty when it does.
func DeadLetterDiff(dl *imv1.DeadLetter, rec *kgo.Record) []string {
	var diffs []string
	if !bytes.Equal(dl.OriginalKey, rec.Key) {
		diffs = append(diffs, fmt.Sprintf("original key %q, want %q", dl.OriginalKey, rec.Key))
	}
	if !bytes.Equal(dl.OriginalValue, rec.Value) {
		diffs = append(diffs, fmt.Sprintf("original value %q, want %q", dl.OriginalValue, rec.Value))
	}
	if dl.OriginalTsMs != rec.Timestamp.UnixMilli() {
		diffs = append(diffs, fmt.Sprintf("original timestamp %d, want %d", dl.OriginalTsMs, rec.Timestamp.UnixMilli()))
	}
	var got, want []string
	for _, h := range dl.OriginalHeaders {
		got = append(got, fmt.Sprintf("%q=%q", h.Key, h.Value))
	}
	for _, h := range rec.Headers {
		want = append(want, fmt.Sprintf("%q=%q", h.Key, h.Value))
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		diffs = append(diffs, fmt.Sprintf("original headers %v, want %v", got, want))
	}
	return diffs
}
