package admin

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
)

// MinTokenBytes is the shortest token a tokens file may hold: 24
// characters, e.g. 18 random bytes in base64 (the stack script writes 32
// random bytes in hex).
const MinTokenBytes = 24

// validName is what an actor name may be: it is written into logs, the
// key store and the log's erasure records.
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)

// Tokens are the operators' bearer tokens, read from a file of lines
// "name:token" (blank lines and lines starting with # are skipped). The
// name is the actor recorded with what the token does; a name may appear
// on several lines (an old and a new token while one is rotated), a token
// only once. The file is read again when it changes (its size, time or
// identity: a Kubernetes Secret volume swaps a symlink), so a rotation
// needs no restart; a file that becomes unreadable or invalid refuses
// every token until it is fixed.
type Tokens struct {
	path string

	mu      sync.Mutex
	stat    os.FileInfo
	entries []entry
	err     error
}

type entry struct {
	name string
	sum  [sha256.Size]byte
}

// OpenTokens reads the tokens file at path.
func OpenTokens(path string) (*Tokens, error) {
	t := &Tokens{path: path}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reload()
	return t, t.err
}

// reload reads the file again if it changed since the last read. t.mu held.
func (t *Tokens) reload() {
	fi, err := os.Stat(t.path)
	if err != nil {
		t.stat, t.entries, t.err = nil, nil, fmt.Errorf("%s: %w", EnvTokensFile, err)
		return
	}
	if t.stat != nil && os.SameFile(t.stat, fi) && fi.ModTime().Equal(t.stat.ModTime()) && fi.Size() == t.stat.Size() {
		return
	}
	b, err := os.ReadFile(t.path)
	if err == nil {
		t.entries, err = parseTokens(b)
	}
	if err != nil {
		t.stat, t.entries, t.err = nil, nil, fmt.Errorf("%s=%s: %w", EnvTokensFile, t.path, err)
		return
	}
	t.stat, t.err = fi, nil
}

func parseTokens(b []byte) ([]entry, error) {
	var out []entry
	seen := map[[sha256.Size]byte]bool{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, tok, ok := strings.Cut(line, ":")
		// The token is never quoted in an error: only the line number.
		switch {
		case !ok:
			return nil, fmt.Errorf("line %d: want name:token", n)
		case !validName.MatchString(name):
			return nil, fmt.Errorf("line %d: name %q: want 1-64 of A-Z a-z 0-9 . _ @ -, starting with a letter or digit", n, name)
		case len(tok) < MinTokenBytes:
			return nil, fmt.Errorf("line %d: the token of %s is %d bytes, want at least %d", n, name, len(tok), MinTokenBytes)
		case strings.ContainsAny(tok, " \t"):
			return nil, fmt.Errorf("line %d: the token of %s holds a space", n, name)
		}
		sum := sha256.Sum256([]byte(tok))
		if seen[sum] {
			return nil, fmt.Errorf("line %d: the token of %s is on an earlier line too", n, name)
		}
		seen[sum] = true
		out = append(out, entry{name, sum})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no token in the file (want lines name:token)")
	}
	return out, nil
}

// actor returns the name of the token presented, or "" when it matches
// none, and the file's error when it cannot be read. Every entry is
// compared, in constant time, as SHA-256 sums (so neither a token's
// length nor the position of its first wrong byte shows in the timing).
func (t *Tokens) actor(presented string) (string, error) {
	sum := sha256.Sum256([]byte(presented))
	t.mu.Lock()
	t.reload()
	entries, err := t.entries, t.err
	t.mu.Unlock()
	if err != nil {
		return "", err
	}
	found := -1
	for i, e := range entries {
		if subtle.ConstantTimeCompare(sum[:], e.sum[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", nil
	}
	return entries[found].name, nil
}
