package export

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// S3 is a Store in an S3-compatible bucket (AWS S3, MinIO, Ceph RGW,
// SeaweedFS, ...), under Prefix. An upload is spooled to a local file and
// sent with one PutObject at Commit: S3 makes an object visible only once
// its whole body has arrived (and, with the checksum the SDK sends, arrived
// intact), so there is no rename to do, and a crash before or during the
// PUT leaves nothing visible. The PUT is conditional (If-None-Match: *):
// when an object of that name exists already, it stays as it is and the
// commit succeeds, since a name stands for one partition's offset range,
// whose rows are the same whoever wrote them. A server that does not
// implement conditional writes (501) gets plain PUTs from then on.
//
// Objects larger than 5 GiB need multipart uploads, which S3 does not
// do: keep MaxRows such that a file stays well below that.
type S3 struct {
	Client *s3.Client
	Bucket string
	// Prefix is prepended to every name, without a leading slash; "" or a
	// path ending in "/".
	Prefix string
	// SpoolDir holds uploads until their PUT (default os.TempDir()).
	SpoolDir string

	unconditional atomic.Bool // the server refused If-None-Match with 501
}

var _ Store = (*S3)(nil)

// S3Config says how to reach a bucket. Credentials and anything unset
// here come from the AWS SDK's default chain: AWS_ACCESS_KEY_ID and
// AWS_SECRET_ACCESS_KEY, AWS_PROFILE and the shared files, AWS_REGION,
// AWS_ENDPOINT_URL_S3, the instance's role, ...
type S3Config struct {
	// URL is s3://bucket or s3://bucket/prefix.
	URL string
	// Endpoint of an S3-compatible server, e.g. http://127.0.0.1:9000;
	// empty: AWS (or AWS_ENDPOINT_URL_S3).
	Endpoint string
	// Region, default AWS_REGION or else us-east-1.
	Region string
	// PathStyle addresses the bucket in the path (http://host/bucket/key)
	// rather than the host name, as most S3-compatible servers need.
	PathStyle bool
	// SpoolDir: see S3.SpoolDir.
	SpoolDir string
}

// NewS3 builds an S3 store from c. It sends no request.
func NewS3(ctx context.Context, c S3Config) (*S3, error) {
	rest, ok := strings.CutPrefix(c.URL, "s3://")
	bucket, prefix, _ := strings.Cut(rest, "/")
	if !ok || bucket == "" {
		return nil, fmt.Errorf("S3 URL %q: want s3://bucket or s3://bucket/prefix", c.URL)
	}
	if prefix = strings.Trim(prefix, "/"); prefix != "" {
		prefix += "/"
	}
	opts := []func(*awsconfig.LoadOptions) error{
		// More and longer retries than the SDK's default 3: a commit that
		// fails ends the export (see Exporter.Run).
		awsconfig.WithRetryer(func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) { o.MaxAttempts = 10 })
		}),
	}
	if c.Region != "" {
		opts = append(opts, awsconfig.WithRegion(c.Region))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS config: %w", err)
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	cl := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if c.Endpoint != "" {
			o.BaseEndpoint = aws.String(c.Endpoint)
		}
		o.UsePathStyle = c.PathStyle
	})
	return &S3{Client: cl, Bucket: bucket, Prefix: prefix, SpoolDir: c.SpoolDir}, nil
}

func (s *S3) spoolDir() string {
	if s.SpoolDir != "" {
		return s.SpoolDir
	}
	return os.TempDir()
}

// Create implements Store.
func (s *S3) Create(_ context.Context, tag string) (Upload, error) {
	if err := os.MkdirAll(s.spoolDir(), 0o755); err != nil {
		return nil, fmt.Errorf("make spool directory: %w", err)
	}
	f, err := os.CreateTemp(s.spoolDir(), "."+tagOf(tag)+"*.tmp")
	if err != nil {
		return nil, fmt.Errorf("create spool file: %w", err)
	}
	return &s3Upload{s: s, f: f, w: bufio.NewWriterSize(f, 1<<20)}, nil
}

// List implements Store.
func (s *S3) List(ctx context.Context, fn func(name string) error) error {
	pg := s3.NewListObjectsV2Paginator(s.Client, &s3.ListObjectsV2Input{Bucket: &s.Bucket, Prefix: &s.Prefix})
	for pg.HasMorePages() {
		page, err := pg.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("list s3://%s/%s: %w", s.Bucket, s.Prefix, err)
		}
		for _, o := range page.Contents {
			if err := fn(strings.TrimPrefix(aws.ToString(o.Key), s.Prefix)); err != nil {
				return err
			}
		}
	}
	return nil
}

// Sweep implements Store: it removes spool files of uploads whose tag
// starts with prefix. Nothing is left in the bucket by an upload that
// did not commit.
func (s *S3) Sweep(_ context.Context, prefix string) error {
	left, err := filepath.Glob(filepath.Join(s.spoolDir(), "."+tagOf(prefix)+"*.tmp"))
	if err != nil {
		return err
	}
	for _, p := range left {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

type s3Upload struct {
	s    *S3
	name string
	f    *os.File
	w    *bufio.Writer
	done bool
}

func (u *s3Upload) Write(p []byte) (int, error) { return u.w.Write(p) }

func (u *s3Upload) Commit(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	u.name = name
	if err := u.w.Flush(); err != nil {
		return fmt.Errorf("spool %s: %w", u.name, err)
	}
	size, err := u.f.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("spool %s: %w", u.name, err)
	}
	err = u.put(ctx, size, !u.s.unconditional.Load())
	if apiCode(err) == "NotImplemented" && !u.s.unconditional.Load() {
		u.s.unconditional.Store(true)
		err = u.put(ctx, size, false)
	}
	if apiCode(err) == "PreconditionFailed" {
		err = nil // the object is there already: see S3
	}
	if err != nil {
		return fmt.Errorf("put s3://%s/%s%s: %w", u.s.Bucket, u.s.Prefix, u.name, err)
	}
	u.done = true
	u.f.Close()
	os.Remove(u.f.Name())
	return nil
}

func (u *s3Upload) put(ctx context.Context, size int64, conditional bool) error {
	in := &s3.PutObjectInput{
		Bucket:        &u.s.Bucket,
		Key:           aws.String(u.s.Prefix + u.name),
		Body:          io.NewSectionReader(u.f, 0, size),
		ContentLength: aws.Int64(size),
		ContentType:   aws.String("application/vnd.apache.parquet"),
	}
	if conditional {
		in.IfNoneMatch = aws.String("*")
	}
	_, err := u.s.Client.PutObject(ctx, in)
	return err
}

func (u *s3Upload) Abort() error {
	if u.done {
		return nil
	}
	u.done = true
	u.f.Close()
	if err := os.Remove(u.f.Name()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// apiCode is the S3 error code of err, or "".
func apiCode(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}
