package export

import (
	"context"
	"io"
)

// Store is where the export's files go: a local directory (Dir) or an
// S3-compatible bucket (S3). Names are slash-separated paths relative to
// the root of the export, as File.Path makes them.
//
// The one promise a Store makes is that a file becomes visible under its
// name whole or not at all: a reader listing the store never sees a part
// of a file, however the writer died. Every implementation passes the
// conformance suite in store_test.go.
type Store interface {
	// Create starts a file whose name is given at Commit (a file's name
	// says which offsets it holds, known only once it is written). tag
	// marks what the upload leaves behind if its writer dies, for Sweep:
	// the exporter passes the file name's prefix, e.g. "part-p003-".
	// Nothing is visible until Commit returns nil; Abort, or a crash,
	// leaves nothing visible. ctx governs Create only.
	Create(ctx context.Context, tag string) (Upload, error)
	// List calls fn with the name of every visible file under the root,
	// in no particular order, and stops at fn's first error. It blocks
	// until the listing ends or ctx ends.
	List(ctx context.Context, fn func(name string) error) error
	// Sweep removes what uploads whose tag starts with prefix left
	// behind when their writer died before Commit or Abort. Only the owner of those files may call it:
	// the exporter calls it for the partitions it was just assigned.
	Sweep(ctx context.Context, prefix string) error
}

// Upload is one file being written. It is not safe for concurrent use.
type Upload interface {
	io.Writer
	// Commit makes the file visible under name, durably: once it
	// returns nil the file survives a crash of the process (and, for Dir,
	// of the machine). A file of the same name that is already there is
	// replaced (Dir) or kept (S3): either way the name holds one whole
	// file. ctx bounds the commit.
	Commit(ctx context.Context, name string) error
	// Abort drops the upload; nothing becomes visible. It may be called
	// after a failed Commit, and does nothing after a successful one.
	Abort() error
}
