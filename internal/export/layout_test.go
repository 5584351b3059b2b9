package export

import (
	"testing"
	"time"
)

func TestPathRoundTrip(t *testing.T) {
	hour := time.Date(2026, 12, 4, 17, 0, 0, 0, time.UTC)
	for _, f := range []File{
		{Partition: 3, First: 120, Last: 4500, Hour: hour},
		{Partition: 0, First: 0, Last: 0, Hour: time.Unix(0, 0).UTC()},
		{Partition: 1234, First: 999_999_999_999, Last: 1_000_000_000_123, Hour: hour.Add(6 * time.Hour)},
	} {
		p := f.Path()
		got, ok := ParsePath(p)
		if !ok || got.Partition != f.Partition || got.First != f.First || got.Last != f.Last || !got.Hour.Equal(f.Hour) {
			t.Errorf("ParsePath(%q) = %+v, %v; want %+v", p, got, ok, f)
		}
	}
	if got := (File{Partition: 3, First: 120, Last: 4500, Hour: hour}).Path(); got != "date=2026-12-04/hour=17/part-p003-o000000000120-o000000004500.parquet" {
		t.Errorf("Path = %q", got)
	}
}

func TestParsePathRefuses(t *testing.T) {
	for _, p := range []string{
		"",
		"part-p003-o1-o2.parquet", // no date and hour
		"date=2026-12-04/hour=24/part-p003-o1-o2.parquet", // no such hour
		"date=2026-13-04/hour=01/part-p003-o1-o2.parquet", // no such month
		"date=2026-12-04/hour=01/part-p003-o5-o2.parquet", // last before first
		"date=2026-12-04/hour=01/part-p003-o1-o2.parquet.tmp",
		"date=2026-12-04/hour=01/.part-p003-o1-o2.parquet",
		"date=2026-12-04/hour=01/part-p003-o1-o99999999999999999999.parquet", // overflows int64
	} {
		if f, ok := ParsePath(p); ok {
			t.Errorf("ParsePath(%q) = %+v, want refused", p, f)
		}
	}
}

func TestProgressOf(t *testing.T) {
	h := HourOf(1_796_000_000_000)
	path := func(part int32, first, last int64, hour time.Time) string {
		return File{Partition: part, First: first, Last: last, Hour: hour}.Path()
	}
	p := ProgressOf([]string{
		path(0, 0, 99, h),
		path(0, 102, 250, h.Add(time.Hour)), // 100-101: a transaction marker
		path(0, 251, 300, h),                // back in the earlier hour (clock skew)
		path(1, 0, 10, h),
		path(1, 5, 20, h), // overlaps the one before
		"README.txt",
		"date=2026-12-04/hour=17/other.parquet",
	})
	if p.Files != 5 {
		t.Errorf("Files = %d, want 5", p.Files)
	}
	if p.Next[0] != 301 || p.Next[1] != 21 {
		t.Errorf("Next = %v, want 0:301 1:21", p.Next)
	}
	if _, ok := p.Next[2]; ok {
		t.Errorf("Next has partition 2, which has no file")
	}
	if len(p.Overlaps) != 1 || p.Overlaps[0].First != 5 {
		t.Errorf("Overlaps = %+v, want the file of partition 1 from offset 5", p.Overlaps)
	}
}
