package auth

import (
	"errors"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// ErrMissingToken is returned when a request carries no token.
var ErrMissingToken = errors.New("missing bearer token")

// TokenError says why a token was rejected.
type TokenError struct {
	Reason  string
	Expired bool
}

func (e *TokenError) Error() string { return "invalid token: " + e.Reason }

// Code maps a Verify error to the client-facing code: TOKEN_EXPIRED for an
// expired token, UNAUTHENTICATED for everything else. No auth error is
// retryable with the same token.
func Code(err error) imv1.ErrorCode {
	var te *TokenError
	if errors.As(err, &te) && te.Expired {
		return imv1.ErrorCode_ERROR_CODE_TOKEN_EXPIRED
	}
	return imv1.ErrorCode_ERROR_CODE_UNAUTHENTICATED
}
