package export

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Dir is a Store in a local directory. An upload is written to a hidden
// file under Root/_tmp, then fsynced, renamed to its name (rename is atomic
// within one file system) and the directory it landed in fsynced, so a
// crash of the process or the machine leaves either the whole file under
// its name or nothing. Readers skip _tmp: Spark, Trino and Hive ignore
// paths starting with "_" or ".", and a *.parquet glob does not match the
// ".tmp" names in it.
type Dir struct {
	Root string
}

var _ Store = (*Dir)(nil)

// tmpDir holds uploads in progress, on the same file system as Root.
const tmpDir = "_tmp"

// Create implements Store.
func (d *Dir) Create(_ context.Context, tag string) (Upload, error) {
	tmp := filepath.Join(d.Root, tmpDir)
	if err := mkdirAllSync(tmp); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(tmp, "."+tagOf(tag)+"*.tmp")
	if err != nil {
		return nil, fmt.Errorf("create temp file: %w", err)
	}
	return &dirUpload{root: d.Root, f: f, w: bufio.NewWriterSize(f, 1<<20)}, nil
}

// List implements Store: every regular file outside _tmp and hidden
// directories.
func (d *Dir) List(ctx context.Context, fn func(name string) error) error {
	err := filepath.WalkDir(d.Root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		base := e.Name()
		if e.IsDir() {
			if p != d.Root && (strings.HasPrefix(base, "_") || strings.HasPrefix(base, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !e.Type().IsRegular() || strings.HasPrefix(base, ".") {
			return nil
		}
		rel, err := filepath.Rel(d.Root, p)
		if err != nil {
			return err
		}
		return fn(filepath.ToSlash(rel))
	})
	if errors.Is(err, fs.ErrNotExist) {
		return nil // nothing exported yet
	}
	return err
}

// Sweep implements Store: it removes the temp files of uploads whose tag
// starts with prefix.
func (d *Dir) Sweep(_ context.Context, prefix string) error {
	left, err := filepath.Glob(filepath.Join(d.Root, tmpDir, "."+tagOf(prefix)+"*.tmp"))
	if err != nil {
		return err
	}
	for _, p := range left {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return nil
}

type dirUpload struct {
	root, name string
	f          *os.File
	w          *bufio.Writer
	done       bool
}

func (u *dirUpload) Write(p []byte) (int, error) { return u.w.Write(p) }

func (u *dirUpload) Commit(_ context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	u.name = name
	if err := u.w.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", u.name, err)
	}
	if err := u.f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", u.name, err)
	}
	if err := u.f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", u.name, err)
	}
	final := filepath.Join(u.root, filepath.FromSlash(u.name))
	if err := mkdirAllSync(filepath.Dir(final)); err != nil {
		return err
	}
	if err := os.Rename(u.f.Name(), final); err != nil {
		return fmt.Errorf("rename %s: %w", u.name, err)
	}
	u.done = true
	return syncDir(filepath.Dir(final))
}

func (u *dirUpload) Abort() error {
	if u.done {
		return nil
	}
	u.done = true
	u.f.Close()
	if err := os.Remove(u.f.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// mkdirAllSync makes dir and its missing parents, fsyncing the parent of
// each directory it made so the new entry survives a crash.
func mkdirAllSync(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	parent := filepath.Dir(dir)
	if parent != dir {
		if err := mkdirAllSync(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil // made by a concurrent upload
		}
		return fmt.Errorf("make directory: %w", err)
	}
	return syncDir(parent)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open directory for fsync: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync directory %s: %w", dir, err)
	}
	return nil
}

// checkName refuses names that would leave the root or hide the file.
func checkName(name string) error {
	if name == "" || path.IsAbs(name) || path.Clean(name) != name || strings.HasPrefix(name, "../") || name == ".." ||
		strings.HasPrefix(path.Base(name), ".") || strings.HasPrefix(name, tmpDir+"/") {
		return fmt.Errorf("bad file name %q: want a clean relative path of a visible file", name)
	}
	return nil
}

// tagOf keeps a tag to characters that are safe in a file name and in a
// glob pattern.
func tagOf(tag string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, tag)
}
