package wire

import "unicode/utf8"

// unescapedString returns the content of raw when raw is a JSON string
// that needs no decoding: a quote, then valid UTF-8 without a quote, a
// backslash or a control character, then a quote. json.Unmarshal would
// decode it to exactly those bytes; anything else (escapes, invalid UTF-8,
// which json.Unmarshal turns into U+FFFD) is left to json.Unmarshal.
// Chat text is almost always of this kind, and this is a fraction of
// json.Unmarshal's CPU.
func unescapedString(raw []byte) ([]byte, bool) {
	if len(raw) < 2 || raw[0] != '"' || raw[len(raw)-1] != '"' {
		return nil, false
	}
	inner := raw[1 : len(raw)-1]
	ascii := true
	for _, c := range inner {
		switch {
		case c < 0x20 || c == '"' || c == '\\':
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
	}
	if !ascii && !utf8.Valid(inner) {
		return nil, false
	}
	return inner, true
}

// canonicalString reports whether raw is a JSON string that json.Marshal
// would write unchanged as a raw value: an unescapedString without the
// bytes it escapes (<, > and &) and without 0xE2, the first byte of U+2028
// and U+2029 (other runes that start with it take the slow path too).
func canonicalString(raw []byte) bool {
	inner, ok := unescapedString(raw)
	if !ok {
		return false
	}
	for _, c := range inner {
		switch c {
		case '<', '>', '&', 0xE2:
			return false
		}
	}
	return true
}
