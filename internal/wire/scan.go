package wire

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// Scanner reads the JSON of the hot frames without encoding/json's
// reflection. It accepts only what it fully understands, so that whatever
// it accepts, encoding/json decodes to the same values: known keys spelled
// exactly, each once; strings without escapes, in valid UTF-8; integers as
// plain digits that fit an int64; true and false; raw values that
// json.Valid accepts (not null). Every method returns false on anything
// else, and the caller decodes the input with encoding/json instead. The
// client SDK reads the gateway's frames with it; the gateway reads client
// frames with the strict decoder of strict.go, which refuses ambiguous
// JSON instead of falling back.
type Scanner struct {
	b []byte
	i int
}

// NewScanner reads b.
func NewScanner(b []byte) *Scanner { return &Scanner{b: b} }

// End reports whether only whitespace is left.
func (s *Scanner) End() bool {
	s.space()
	return s.i == len(s.b)
}

func (s *Scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *Scanner) byte(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// Object reads {"key": value, ...}: each key must be in keys (at most 32,
// numbered 0..31) and appear once; field(n) reads the value of key n.
func (s *Scanner) Object(keys map[string]int, field func(n int) bool) bool {
	if !s.byte('{') {
		return false
	}
	if s.byte('}') {
		return true
	}
	var seen uint32
	for {
		k, ok := s.plain()
		if !ok || !s.byte(':') {
			return false
		}
		n, known := keys[string(k)]
		if !known || seen&(1<<n) != 0 || !field(n) {
			return false
		}
		seen |= 1 << n
		if s.byte('}') {
			return true
		}
		if !s.byte(',') {
			return false
		}
	}
}

// Array reads [v, ...], calling elem for each value.
func (s *Scanner) Array(elem func() bool) bool {
	if !s.byte('[') {
		return false
	}
	if s.byte(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if s.byte(']') {
			return true
		}
		if !s.byte(',') {
			return false
		}
	}
}

// plain reads a string without escapes or control characters, in valid
// UTF-8 (the only strings encoding/json keeps byte for byte).
func (s *Scanner) plain() ([]byte, bool) {
	if !s.byte('"') {
		return nil, false
	}
	start, ascii := s.i, true
	for j := start; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			v := s.b[start:j]
			if !ascii && !utf8.Valid(v) {
				return nil, false
			}
			s.i = j + 1
			return v, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	return nil, false
}

// Str reads a string into dst.
func (s *Scanner) Str(dst *string) bool {
	v, ok := s.plain()
	if ok {
		*dst = string(v)
	}
	return ok
}

// Strings reads an array of strings; [] is an empty, non-nil slice, as
// encoding/json makes it.
func (s *Scanner) Strings(dst *[]string) bool {
	out := []string{}
	ok := s.Array(func() bool {
		var v string
		if !s.Str(&v) {
			return false
		}
		out = append(out, v)
		return true
	})
	if ok {
		*dst = out
	}
	return ok
}

// Int reads an integer in JSON's form (no leading zeros, fraction or
// exponent) that fits an int64.
func (s *Scanner) Int(dst *int64) bool {
	s.space()
	j := s.i
	if j < len(s.b) && s.b[j] == '-' {
		j++
	}
	d := j
	for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
		j++
	}
	if j == d || (s.b[d] == '0' && j-d > 1) {
		return false
	}
	if j < len(s.b) && (s.b[j] == '.' || s.b[j] == 'e' || s.b[j] == 'E') {
		return false
	}
	n, err := strconv.ParseInt(string(s.b[s.i:j]), 10, 64)
	if err != nil {
		return false
	}
	*dst, s.i = n, j
	return true
}

// IntInt is Int into an int (int64 on the 64-bit platforms seqflow runs
// on; a value that does not fit is refused).
func (s *Scanner) IntInt(dst *int) bool {
	var n int64
	if !s.Int(&n) || int64(int(n)) != n {
		return false
	}
	*dst = int(n)
	return true
}

// Bool reads true or false.
func (s *Scanner) Bool(dst *bool) bool {
	s.space()
	switch {
	case len(s.b)-s.i >= 4 && string(s.b[s.i:s.i+4]) == "true":
		*dst, s.i = true, s.i+4
	case len(s.b)-s.i >= 5 && string(s.b[s.i:s.i+5]) == "false":
		*dst, s.i = false, s.i+5
	default:
		return false
	}
	return true
}

// Raw reads any JSON value but null (the protocol never sends one where a
// raw value goes, so it is left to encoding/json) and copies it.
func (s *Scanner) Raw(dst *json.RawMessage) bool {
	s.space()
	start, depth, j := s.i, 0, s.i
scan:
	for ; j < len(s.b); j++ {
		switch s.b[j] {
		case '"':
			for j++; j < len(s.b) && s.b[j] != '"'; j++ {
				if s.b[j] == '\\' {
					j++
				}
			}
			if depth == 0 {
				j++
				break scan
			}
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth < 0 {
				break scan
			}
			if depth == 0 {
				j++
				break scan
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				break scan
			}
		}
	}
	v := s.b[start:min(j, len(s.b))]
	if len(v) == 0 || string(v) == "null" || !json.Valid(v) {
		return false
	}
	*dst = append(json.RawMessage(nil), v...)
	s.i = start + len(v)
	return true
}
