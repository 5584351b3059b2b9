package export

import (
	"cmp"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"time"
)

// File names a finished file of the export: the events of one Kafka
// partition from offset First to offset Last (both included, both records
// of the file), all of whose server_ts_ms fall in the hour starting at Hour
// (UTC). Its path is hive-style:
//
//	date=2026-12-04/hour=17/part-p003-o000000000120-o000000004500.parquet
//
// Offsets are zero-padded to 12 digits so that names sort by offset up to
// 10^12; a larger offset just takes more digits, and ParsePath reads any
// width.
type File struct {
	Partition   int32
	First, Last int64
	Hour        time.Time
}

// Path returns the file's path relative to the root of the export.
func (f File) Path() string {
	h := f.Hour.UTC()
	return fmt.Sprintf("date=%s/hour=%02d/part-p%03d-o%012d-o%012d.parquet",
		h.Format(time.DateOnly), h.Hour(), f.Partition, f.First, f.Last)
}

var pathRE = regexp.MustCompile(`^date=(\d{4}-\d{2}-\d{2})/hour=(\d{2})/part-p(\d+)-o(\d+)-o(\d+)\.parquet$`)

// ParsePath reads a File back from its path, relative to the root of the
// export; ok is false for any other name (a file someone else put there).
func ParsePath(p string) (f File, ok bool) {
	m := pathRE.FindStringSubmatch(path.Clean(p))
	if m == nil {
		return File{}, false
	}
	day, err := time.Parse(time.DateOnly, m[1])
	if err != nil {
		return File{}, false
	}
	hour, _ := strconv.Atoi(m[2])
	part, perr := strconv.ParseInt(m[3], 10, 32)
	first, ferr := strconv.ParseInt(m[4], 10, 64)
	last, lerr := strconv.ParseInt(m[5], 10, 64)
	if hour > 23 || perr != nil || ferr != nil || lerr != nil || first > last {
		return File{}, false
	}
	return File{Partition: int32(part), First: first, Last: last, Hour: day.Add(time.Duration(hour) * time.Hour)}, true
}

// HourOf is the hour bucket of a server_ts_ms: the start of its UTC hour.
func HourOf(ms int64) time.Time {
	return time.UnixMilli(ms).UTC().Truncate(time.Hour)
}

// Progress is what the files of an export say about each partition: the
// offset after the last record exported, and the files that overlap
// another (a sign of a second writer, see the package doc).
type Progress struct {
	Next     map[int32]int64
	Files    int
	Overlaps []File
}

// ProgressOf reads the progress of an export from the paths of its files;
// other names are ignored.
func ProgressOf(paths []string) Progress {
	p := Progress{Next: map[int32]int64{}}
	byPart := map[int32][]File{}
	for _, s := range paths {
		f, ok := ParsePath(s)
		if !ok {
			continue
		}
		p.Files++
		byPart[f.Partition] = append(byPart[f.Partition], f)
		if next := f.Last + 1; next > p.Next[f.Partition] {
			p.Next[f.Partition] = next
		}
	}
	for _, fs := range byPart {
		p.Overlaps = append(p.Overlaps, overlaps(fs)...)
	}
	return p
}

// overlaps returns each file whose range overlaps that of an earlier one
// (by first offset).
func overlaps(fs []File) []File {
	slices.SortFunc(fs, func(a, b File) int { return cmp.Compare(a.First, b.First) })
	var out []File
	end := int64(-1)
	for _, f := range fs {
		if f.First <= end {
			out = append(out, f)
		}
		end = max(end, f.Last)
	}
	return out
}
