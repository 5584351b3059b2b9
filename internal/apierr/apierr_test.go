package apierr

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// TestEveryCodeRegistered fails when a code is added to errors.proto
// without a registry entry.
func TestEveryCodeRegistered(t *testing.T) {
	for num, name := range imv1.ErrorCode_name {
		t.Run(name, func(t *testing.T) {
			e, ok := Lookup(imv1.ErrorCode(num))
			if !ok {
				t.Fatalf("%s has no registry entry", name)
			}
			if e.Message == "" || e.HTTPStatus < 400 {
				t.Fatalf("%s entry incomplete: %+v", name, e)
			}
		})
	}
}

func TestError(t *testing.T) {
	cases := []struct {
		name      string
		err       *Error
		wantName  string
		wantMsg   string
		retryable bool
		status    int
	}{
		{"detail", Newf(imv1.ErrorCode_ERROR_CODE_TOO_LARGE, "body is %d bytes, limit %d", 10, 5), "too_large", "body is 10 bytes, limit 5", false, http.StatusRequestEntityTooLarge},
		{"default message", New(imv1.ErrorCode_ERROR_CODE_UNAVAILABLE, ""), "unavailable", registry[imv1.ErrorCode_ERROR_CODE_UNAVAILABLE].Message, true, http.StatusServiceUnavailable},
		{"percent kept without args", New(imv1.ErrorCode_ERROR_CODE_BAD_FRAME, "100% wrong"), "bad_frame", "100% wrong", false, http.StatusBadRequest},
		{"unknown code", New(imv1.ErrorCode(9999), ""), "unspecified", "unspecified error", false, http.StatusInternalServerError},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			b := c.err.Body()
			if b.Name != c.wantName || b.Message != c.wantMsg || b.Retryable != c.retryable || c.err.HTTPStatus() != c.status {
				t.Fatalf("body = %+v status %d, want name %q msg %q retryable %v status %d", b, c.err.HTTPStatus(), c.wantName, c.wantMsg, c.retryable, c.status)
			}
			if !strings.HasPrefix(c.err.Error(), c.wantName+": ") {
				t.Fatalf("Error() = %q", c.err.Error())
			}
		})
	}
}

// TestProtocolDocListsEveryCode keeps docs/protocol.md's error table in
// step with the registry.
func TestProtocolDocListsEveryCode(t *testing.T) {
	doc, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	for num := range imv1.ErrorCode_name {
		code := imv1.ErrorCode(num)
		if code == imv1.ErrorCode_ERROR_CODE_UNSPECIFIED {
			continue
		}
		row := fmt.Sprintf("| %d | `%s` | %d |", num, Name(code), registry[code].HTTPStatus)
		if !strings.Contains(string(doc), row) {
			t.Errorf("docs/protocol.md has no row starting %q", row)
		}
	}
}
