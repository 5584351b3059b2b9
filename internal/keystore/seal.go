package keystore

import (
	"context"
	"errors"
	"fmt"

	"github.com/seqflow/seqflow/schemas/imv1"
)

// ad is the additional data a body is sealed with: a sealed body opens
// only as a body of the same session and sender (imv1.MessageContent).
func ad(session, sender string) []byte {
	return []byte("seqflow-body-v1\x00" + session + "\x00" + sender)
}

// Seal encrypts plaintext with k for a body sender sends to session.
func (k Key) Seal(plaintext []byte, session, sender string) []byte {
	return sealWith(k.aead, plaintext, ad(session, sender))
}

// Open decrypts what Seal sealed with k.
func (k Key) Open(sealed []byte, session, sender string) ([]byte, error) {
	b, err := openWith(k.aead, sealed, ad(session, sender))
	if err != nil {
		return nil, fmt.Errorf("keystore: body under key %d does not open: %w", k.ID, err)
	}
	return b, nil
}

// SealContent seals c's body in place for a message sender sends to
// session, with the sender's current key for that session. An empty body
// stays empty and unsealed. ErrUnavailable: try again later; the content
// must not be sent in plaintext instead.
func (s *Store) SealContent(ctx context.Context, session, sender string, c *imv1.MessageContent) error {
	if c == nil || c.KeyId != 0 || len(c.Body) == 0 {
		return nil
	}
	k, err := s.ForWrite(ctx, sender, session)
	if err != nil {
		return err
	}
	c.Body, c.KeyId = k.Seal(c.Body, session, sender), k.ID
	return nil
}

// OpenBody returns the plaintext of a body stored with keyID (0: body is
// plaintext already). ErrDestroyed and ErrUnknown mean the body is erased
// for good; ErrUnavailable that it may open later.
func (s *Store) OpenBody(ctx context.Context, keyID int64, body []byte, session, sender string) ([]byte, error) {
	if keyID == 0 {
		return body, nil
	}
	k, err := s.Get(ctx, keyID)
	if err != nil {
		return nil, err
	}
	return k.Open(body, session, sender)
}

// Erased tells an error of OpenBody that means the body is gone for good.
func Erased(err error) bool { return errors.Is(err, ErrDestroyed) || errors.Is(err, ErrUnknown) }
