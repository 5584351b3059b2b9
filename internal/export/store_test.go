package export

import (
	"bytes"
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/uuid"
	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// storeUnderTest is a Store with the means to look behind it.
type storeUnderTest struct {
	Store
	read      func(t *testing.T, name string) []byte // a visible file's bytes
	leftovers func(t *testing.T) []string            // what dead uploads left behind
}

// testStore is the conformance suite every Store passes.
func testStore(t *testing.T, newStore func(t *testing.T) storeUnderTest) {
	ctx := context.Background()
	list := func(t *testing.T, s Store) []string {
		t.Helper()
		var names []string
		if err := s.List(ctx, func(n string) error { names = append(names, n); return nil }); err != nil {
			t.Fatal(err)
		}
		slices.Sort(names)
		return names
	}
	put := func(t *testing.T, s Store, name string, body []byte) {
		t.Helper()
		up, err := s.Create(ctx, partTag(1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := up.Write(body); err != nil {
			t.Fatal(err)
		}
		if err := up.Commit(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	name := File{Partition: 1, First: 10, Last: 20, Hour: HourOf(1_796_000_000_000)}.Path()

	t.Run("empty store lists nothing", func(t *testing.T) {
		if got := list(t, newStore(t)); len(got) != 0 {
			t.Fatalf("List = %v, want nothing", got)
		}
	})
	t.Run("nothing is visible before commit", func(t *testing.T) {
		s := newStore(t)
		up, err := s.Create(ctx, partTag(1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := up.Write(bytes.Repeat([]byte("x"), 3<<20)); err != nil {
			t.Fatal(err)
		}
		if got := list(t, s); len(got) != 0 {
			t.Fatalf("List before commit = %v, want nothing", got)
		}
		body := bytes.Repeat([]byte("x"), 3<<20)
		if err := up.Commit(ctx, name); err != nil {
			t.Fatal(err)
		}
		if got := list(t, s); !slices.Equal(got, []string{name}) {
			t.Fatalf("List after commit = %v, want [%s]", got, name)
		}
		if got := s.read(t, name); !bytes.Equal(got, body) {
			t.Fatalf("read back %d bytes, want %d", len(got), len(body))
		}
		if err := up.Abort(); err != nil {
			t.Fatalf("Abort after Commit: %v", err)
		}
		if got := list(t, s); !slices.Equal(got, []string{name}) {
			t.Fatalf("List after a late Abort = %v, want [%s]", got, name)
		}
	})
	t.Run("abort leaves nothing", func(t *testing.T) {
		s := newStore(t)
		up, err := s.Create(ctx, partTag(1))
		if err != nil {
			t.Fatal(err)
		}
		up.Write([]byte("partial"))
		if err := up.Abort(); err != nil {
			t.Fatal(err)
		}
		if got := list(t, s); len(got) != 0 {
			t.Fatalf("List = %v, want nothing", got)
		}
		if got := s.leftovers(t); len(got) != 0 {
			t.Fatalf("leftovers after Abort: %v", got)
		}
	})
	t.Run("sweep removes what a dead upload left, only of its tag", func(t *testing.T) {
		s := newStore(t)
		for _, part := range []int32{1, 2, 12} {
			up, err := s.Create(ctx, partTag(part))
			if err != nil {
				t.Fatal(err)
			}
			up.Write([]byte("the writer dies here"))
		}
		if err := s.Sweep(ctx, partTag(1)); err != nil {
			t.Fatal(err)
		}
		if got := s.leftovers(t); len(got) != 2 {
			t.Fatalf("after sweeping partition 1: leftovers %v, want those of partitions 2 and 12", got)
		}
		if got := list(t, s); len(got) != 0 {
			t.Fatalf("List = %v, want nothing", got)
		}
	})
	t.Run("a name committed twice holds one whole file", func(t *testing.T) {
		s := newStore(t)
		put(t, s, name, []byte("first"))
		put(t, s, name, []byte("again"))
		if got := list(t, s); !slices.Equal(got, []string{name}) {
			t.Fatalf("List = %v, want [%s]", got, name)
		}
		if got := string(s.read(t, name)); got != "first" && got != "again" {
			t.Fatalf("read %q", got)
		}
	})
	t.Run("lists nested names", func(t *testing.T) {
		s := newStore(t)
		names := []string{
			File{Partition: 0, First: 0, Last: 5, Hour: HourOf(0)}.Path(),
			File{Partition: 3, First: 6, Last: 9, Hour: HourOf(3_600_000)}.Path(),
			"README.txt",
		}
		for _, n := range names {
			put(t, s, n, []byte(n))
		}
		slices.Sort(names)
		if got := list(t, s); !slices.Equal(got, names) {
			t.Fatalf("List = %v, want %v", got, names)
		}
	})
	t.Run("bad names are refused", func(t *testing.T) {
		s := newStore(t)
		for _, n := range []string{"", "/abs.parquet", "../up.parquet", "a/../../b", "date=x/.hidden.parquet", "_tmp/x.parquet", "a//b"} {
			up, err := s.Create(ctx, partTag(1))
			if err != nil {
				t.Fatal(err)
			}
			if err := up.Commit(ctx, n); err == nil {
				t.Errorf("Commit(%q) = nil, want an error", n)
			}
			up.Abort()
		}
		if got := list(t, s); len(got) != 0 {
			t.Fatalf("List = %v, want nothing", got)
		}
	})
}

func TestDirStore(t *testing.T) {
	testStore(t, func(t *testing.T) storeUnderTest {
		d := &Dir{Root: filepath.Join(t.TempDir(), "export")}
		return storeUnderTest{
			Store: d,
			read: func(t *testing.T, name string) []byte {
				b, err := os.ReadFile(filepath.Join(d.Root, name))
				if err != nil {
					t.Fatal(err)
				}
				return b
			},
			leftovers: func(t *testing.T) []string { return globNames(t, filepath.Join(d.Root, tmpDir, "*")) },
		}
	})
}

// TestS3Store runs the suite against gofakes3, an in-process fake of the
// S3 API (memory backend), through the real AWS SDK client: it checks the
// client side (requests, paging, If-None-Match, error codes), not the
// behaviour of a real S3 server. See docs/export.md for what was run
// against a real one.
func TestS3Store(t *testing.T) {
	testStore(t, func(t *testing.T) storeUnderTest {
		return s3UnderTest(newFakeS3(t, "exports/seqflow"))
	})
}

func s3UnderTest(s *S3) storeUnderTest {
	return storeUnderTest{
		Store: s,
		read: func(t *testing.T, name string) []byte {
			out, err := s.Client.GetObject(context.Background(), &s3.GetObjectInput{Bucket: &s.Bucket, Key: aws.String(s.Prefix + name)})
			if err != nil {
				t.Fatal(err)
			}
			defer out.Body.Close()
			var b bytes.Buffer
			b.ReadFrom(out.Body)
			return b.Bytes()
		},
		leftovers: func(t *testing.T) []string { return globNames(t, filepath.Join(s.SpoolDir, "*")) },
	}
}

// TestS3StoreOnServer runs the suite against a real S3-compatible server
// when SEQFLOW_TEST_S3_ENDPOINT and SEQFLOW_TEST_S3_BUCKET name one (see
// TestExportSurvivesKill9); the local stack has none.
func TestS3StoreOnServer(t *testing.T) {
	endpoint, bucket := os.Getenv("SEQFLOW_TEST_S3_ENDPOINT"), os.Getenv("SEQFLOW_TEST_S3_BUCKET")
	if endpoint == "" || bucket == "" {
		t.Skip("no S3-compatible server: set SEQFLOW_TEST_S3_ENDPOINT and SEQFLOW_TEST_S3_BUCKET (and AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)")
	}
	testStore(t, func(t *testing.T) storeUnderTest {
		s, err := NewS3(context.Background(), S3Config{URL: "s3://" + bucket + "/suite-" + uuid.NewString()[:8],
			Endpoint: endpoint, PathStyle: true, SpoolDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		return s3UnderTest(s)
	})
	t.Run("conditional put", func(t *testing.T) { logConditional(t, endpoint, bucket) })
}

// logConditional says whether the server keeps the first of two PUTs of
// one name (If-None-Match honoured), refused the condition (501), or
// replaced the object: all three leave one whole file under the name.
func logConditional(t *testing.T, endpoint, bucket string) {
	ctx := context.Background()
	s, err := NewS3(ctx, S3Config{URL: "s3://" + bucket + "/cond-" + uuid.NewString()[:8], Endpoint: endpoint, PathStyle: true, SpoolDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	for _, body := range []string{"first", "again"} {
		up, err := s.Create(ctx, partTag(1))
		if err != nil {
			t.Fatal(err)
		}
		up.Write([]byte(body))
		if err := up.Commit(ctx, "x.parquet"); err != nil {
			t.Fatal(err)
		}
	}
	got := string(s3UnderTest(s).read(t, "x.parquet"))
	switch {
	case s.unconditional.Load():
		t.Logf("%s does not implement conditional writes (501): plain PUTs, the second replaced the first", endpoint)
	case got == "first":
		t.Logf("%s honours If-None-Match: the second PUT kept the first object", endpoint)
	default:
		t.Logf("%s ignored If-None-Match: the second PUT replaced the first object", endpoint)
	}
}

// newFakeS3 serves gofakes3 on a loopback port for the test and returns
// an S3 store on a fresh bucket of it, under prefix.
func newFakeS3(t *testing.T, prefix string) *S3 {
	t.Helper()
	backend := s3mem.New()
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	if err := backend.CreateBucket("seqflow-test"); err != nil {
		t.Fatal(err)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	s, err := NewS3(context.Background(), S3Config{
		URL: "s3://seqflow-test/" + prefix, Endpoint: srv.URL, Region: "us-east-1", PathStyle: true,
		SpoolDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func globNames(t *testing.T, pattern string) []string {
	t.Helper()
	m, err := filepath.Glob(pattern) // unlike a shell, Glob's * matches hidden names
	if err != nil {
		t.Fatal(err)
	}
	return m
}
