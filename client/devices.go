package client

import (
	"context"
	"errors"
	"net/url"
	"time"

	"github.com/coder/websocket"

	"github.com/seqflow/seqflow/internal/wire"
)

// Close codes the client acts on (docs/protocol.md, "Close codes").
const (
	// CloseSignedOut: the device was signed out; its token never works
	// again. Run returns ErrSignedOut.
	CloseSignedOut = 4002
	// CloseReplaced: the login policy closed the connection for a newer
	// one of the same platform or device. Run returns ErrReplaced rather
	// than reconnect, which would close the newer one in turn.
	CloseReplaced = 4003
)

var (
	// ErrSignedOut is returned by Run when the gateway closed the
	// connection because the device was signed out (close code 4002):
	// the app signs in again for a new token.
	ErrSignedOut = errors.New("device signed out")
	// ErrReplaced is returned by Run when the gateway closed the
	// connection for a newer one of the same platform (or device) of the
	// user, by its login policy (close code 4003).
	ErrReplaced = errors.New("connection replaced by a newer one (login policy)")
)

// IsSignedOut reports whether err means the device was signed out: Run's
// ErrSignedOut, or a handshake or call refused with signed_out.
func IsSignedOut(err error) bool {
	var se *ServerError
	return errors.Is(err, ErrSignedOut) || errors.As(err, &se) && se.Name == "signed_out"
}

// closeReason maps a connection's end to ErrSignedOut or ErrReplaced, nil
// for anything else (which the client reconnects after).
func closeReason(err error) error {
	switch websocket.CloseStatus(err) {
	case CloseSignedOut:
		return ErrSignedOut
	case CloseReplaced:
		return ErrReplaced
	}
	return nil
}

// withPlatform adds the platform parameter to a gateway URL.
func withPlatform(u, platform string) string {
	if platform == "" {
		return u
	}
	p, err := url.Parse(u)
	if err != nil {
		return u // wsURL parsed it already
	}
	q := p.Query()
	q.Set("platform", platform)
	p.RawQuery = q.Encode()
	return p.String()
}

// Device is one of the user's devices (Client.Devices).
type Device struct {
	DeviceID string
	// Platform is the one its last connection gave, "" if none.
	Platform string
	// Online: it has an open connection now; Connections counts them.
	Online      bool
	Connections int
	// LastSeen is when a gateway last saw it (now, while online).
	LastSeen time.Time
	// Current marks this client's own device.
	Current bool
}

// Devices lists the user's devices seen within the gateway's retention
// (30 days by default) and not signed out since: online ones first, then
// the most recently seen.
func (c *Client) Devices(ctx context.Context) ([]Device, error) {
	r, err := c.request(ctx, &wire.ClientFrame{Op: wire.OpDevices})
	if err != nil {
		return nil, err
	}
	out := make([]Device, len(r.Devices))
	for i, d := range r.Devices {
		out[i] = Device{DeviceID: d.DeviceID, Platform: d.Platform, Online: d.Online, Connections: d.Connections,
			LastSeen: time.UnixMilli(d.LastSeenMs), Current: d.Current}
	}
	return out, nil
}

// SignOutDevice signs one of the user's devices out: every token of it
// issued up to the returned time (whole seconds, the tokens' iat) is
// refused from now on, on every gateway, and its connections close with
// CloseSignedOut. Signing out this client's own device ends its Run with
// ErrSignedOut.
func (c *Client) SignOutDevice(ctx context.Context, deviceID string) (time.Time, error) {
	r, err := c.request(ctx, &wire.ClientFrame{Op: wire.OpSignOut, DeviceID: deviceID})
	if err != nil {
		return time.Time{}, err
	}
	return time.Unix(r.SignedOutAt, 0), nil
}

// UserPresence is whether a user is online, or when last seen.
type UserPresence struct {
	UserID string
	Online bool
	// Platforms are the platforms of its online devices, sorted.
	Platforms []string
	// LastSeen is when any of its devices was last seen (now, while
	// online); the zero time when none was within the retention.
	LastSeen time.Time
}

// Presence asks for up to 200 users' presence. Users the caller shares no
// session with, existing or not, are returned in notVisible instead.
func (c *Client) Presence(ctx context.Context, users ...string) (presence []UserPresence, notVisible []string, _ error) {
	r, err := c.request(ctx, &wire.ClientFrame{Op: wire.OpPresence, UserIDs: users})
	if err != nil {
		return nil, nil, err
	}
	presence = make([]UserPresence, len(r.Presence))
	for i, p := range r.Presence {
		presence[i] = UserPresence{UserID: p.UserID, Online: p.Online, Platforms: p.Platforms}
		if p.LastSeenMs > 0 {
			presence[i].LastSeen = time.UnixMilli(p.LastSeenMs)
		}
	}
	return presence, r.NotVisible, nil
}

// ReadReceipts says whether the user sends read receipts (the default).
func (c *Client) ReadReceipts(ctx context.Context) (bool, error) {
	r, err := c.request(ctx, &wire.ClientFrame{Op: wire.OpSettings})
	return r.ReadReceipts, err
}

// SetReadReceipts turns sending read receipts on or off for the user, on
// every device. Off, the user's reads still move their read cursor (and
// so their own unread counts), but the other members get no receipt of
// kind read from them and SeenBy neither lists nor counts them. It is an
// account setting, not sequenced.
func (c *Client) SetReadReceipts(ctx context.Context, on bool) error {
	_, err := c.request(ctx, &wire.ClientFrame{Op: wire.OpSettings, ReadReceipts: &on})
	return err
}
