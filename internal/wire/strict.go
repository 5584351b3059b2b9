package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/seqflow/seqflow/internal/apierr"
	"github.com/seqflow/seqflow/schemas/imv1"
)

// Client frames are read with encoding/json/v2's semantics (the
// go-json-experiment module, which becomes the standard library's package
// in Go 1.27). Its defaults refuse what JSON parsers read differently, so
// a proxy, an audit log or a client library in another language can never
// see another frame than the gateway acts on:
//   - the same name twice in one object, at any depth (encoding/json keeps
//     the last, many parsers the first);
//   - invalid UTF-8, raw or as an escaped lone surrogate ("\ud800", which
//     encoding/json turns into U+FFFD and others keep or refuse);
//   - names are matched exactly, and parse refuses a name that differs from
//     a protocol field only in letter case ("Op"), which encoding/json
//     would take for that field (case-insensitive matching, the module's
//     other option, also ignores '_' and '-', which encoding/json does not).

// frameNames and cursorNames are the JSON names of ClientFrame's and
// Cursor's fields.
var frameNames, cursorNames = jsonNames(ClientFrame{}), jsonNames(Cursor{})

func jsonNames(v any) []string {
	t := reflect.TypeOf(v)
	names := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
	}
	return names
}

// rejectUnknown makes the first pass refuse members the protocol does not
// name: frames of current clients have none, and only the others pay for
// the case check and a second pass.
var rejectUnknown = jsonv2.RejectUnknownMembers(true)

// unmarshalFrame decodes data strictly into f; what says "frame" or "body"
// in error details.
func unmarshalFrame(data []byte, f *ClientFrame, what string) *apierr.Error {
	err := jsonv2.Unmarshal(data, f, rejectUnknown)
	if err == nil {
		return nil
	}
	if !errors.Is(err, jsonv2.ErrUnknownName) {
		return jsonError(data, what, err)
	}
	*f = ClientFrame{}
	if err := jsonv2.Unmarshal(data, f); err != nil {
		return jsonError(data, what, err)
	}
	return caseVariants(data, what)
}

// caseVariants refuses a member of the frame, or of one of its cursors,
// whose name equals a protocol field's but for letter case, as
// encoding/json compares them ("Op" for "op"). data is a JSON object.
func caseVariants(data []byte, what string) *apierr.Error {
	dec := jsontext.NewDecoder(bytes.NewReader(data))
	err := names(dec, frameNames, func(name string) error {
		if name != "cursors" || dec.PeekKind() != '[' {
			return dec.SkipValue()
		}
		if _, err := dec.ReadToken(); err != nil {
			return err
		}
		for dec.PeekKind() == '{' {
			if err := names(dec, cursorNames, func(string) error { return dec.SkipValue() }); err != nil {
				return err
			}
		}
		return dec.SkipValue() // the rest of the array
	})
	var v *caseVariantError
	switch {
	case errors.As(err, &v):
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON, "%s has the key %q, which case-insensitive parsers read as %q", what, clip(v.name), v.field)
	case err != nil:
		return jsonError(data, what, err)
	}
	return nil
}

// names reads an object's names, refusing case variants of fields; value
// reads the value of each name.
func names(dec *jsontext.Decoder, fields []string, value func(name string) error) error {
	if _, err := dec.ReadToken(); err != nil { // {
		return err
	}
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		name := tok.String()
		for _, f := range fields {
			if name != f && strings.EqualFold(name, f) {
				return &caseVariantError{name, f}
			}
		}
		if err := value(name); err != nil {
			return err
		}
	}
	_, err := dec.ReadToken() // }
	return err
}

type caseVariantError struct{ name, field string }

func (e *caseVariantError) Error() string { return e.name + " is a case variant of " + e.field }

// jsonError turns a decoding error into the registry's: INVALID_UTF8 for
// bytes that are not UTF-8, AMBIGUOUS_JSON for JSON that encoding/json
// reads but this decoder refuses (a repeated name, a lone surrogate),
// BAD_FRAME otherwise. It runs only on refused input, so its second looks
// cost nothing on the hot path.
func jsonError(data []byte, what string, err error) *apierr.Error {
	if !utf8.Valid(data) {
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_INVALID_UTF8, "%s is not valid UTF-8", what)
	}
	if se := (*jsontext.SyntacticError)(nil); errors.As(err, &se) && json.Valid(data) {
		if errors.Is(err, jsontext.ErrDuplicateName) {
			return apierr.Newf(imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON, "%s has the key %s twice", what, clip(string(se.JSONPointer)))
		}
		return apierr.Newf(imv1.ErrorCode_ERROR_CODE_AMBIGUOUS_JSON, "%s: %s", what, clipN(se.Err.Error(), maxDetailBytes))
	}
	return apierr.Newf(imv1.ErrorCode_ERROR_CODE_BAD_FRAME, "%s is not a JSON object of the protocol: %s", what, clipN(err.Error(), maxDetailBytes))
}

// maxDetailBytes bounds the part of an error detail that quotes the input.
const maxDetailBytes = 160
