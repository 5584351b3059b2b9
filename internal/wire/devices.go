package wire

import (
	"github.com/seqflow/seqflow/internal/apierr"
)

// Device and presence queries (docs/protocol.md, "Devices and presence").
// They read and change account state kept by the gateways in Redis, never
// the sequenced log.
const (
	// OpDevices lists the caller's own devices.
	OpDevices = "devices"
	// OpSignOut signs one of the caller's devices out (DeviceID): its
	// tokens stop working and its connections close.
	OpSignOut = "sign_out"
	// OpPresence asks whether users (UserIDs) are online, or when they
	// were last seen.
	OpPresence = "presence"
)

// MaxPresenceUsers bounds the users of one presence query.
const MaxPresenceUsers = 200

func (f *ClientFrame) devices() *apierr.Error {
	switch f.Op {
	case OpSignOut:
		return idField("device_id", f.DeviceID, MaxSessionIDBytes)
	case OpPresence:
		return userIDs("user_ids", f.UserIDs, MaxPresenceUsers, false)
	}
	return nil
}

// DeviceInfo is one of the caller's devices in a devices result.
type DeviceInfo struct {
	DeviceID string `json:"device_id"`
	// Platform is the one its last connection gave (token claim or the
	// connect's platform parameter); absent when none did.
	Platform string `json:"platform,omitempty"`
	// Online: the device has an open WebSocket connection now.
	Online bool `json:"online"`
	// Connections counts its open WebSocket connections.
	Connections int `json:"connections"`
	// LastSeenMs is when a gateway last saw it (Unix ms): the time of the
	// answer while it is online.
	LastSeenMs int64 `json:"last_seen_ms"`
	// Current marks the device that asked.
	Current bool `json:"current,omitempty"`
}

// DevicesResult answers devices: the caller's devices seen within the
// retention (30 days) and not signed out since, online ones first, then
// most recently seen first.
type DevicesResult struct {
	Op      string       `json:"op"`
	ReqID   string       `json:"req_id,omitempty"`
	Devices []DeviceInfo `json:"devices"`
}

// SignOutResult answers sign_out: every token of DeviceID issued at or
// before SignedOutAt (Unix seconds, the token's iat) is refused from now
// on, and its connections are closed with close code 4002.
type SignOutResult struct {
	Op          string `json:"op"`
	ReqID       string `json:"req_id,omitempty"`
	DeviceID    string `json:"device_id"`
	SignedOutAt int64  `json:"signed_out_at"`
}

// UserPresence is one user in a presence result.
type UserPresence struct {
	UserID string `json:"user_id"`
	// Online: at least one of the user's devices has an open WebSocket
	// connection.
	Online bool `json:"online"`
	// Platforms lists the platforms of the online devices (those that
	// gave one), sorted.
	Platforms []string `json:"platforms,omitempty"`
	// LastSeenMs is when any of the user's devices was last seen (Unix
	// ms); absent (0) when none was within the retention.
	LastSeenMs int64 `json:"last_seen_ms,omitempty"`
}

// PresenceResult answers presence, one entry per visible user in the
// order asked. A user is visible to the caller when they share a session
// (the caller is visible to itself); the others, existing or not, are
// listed in NotVisible, so the answer tells nothing about them.
type PresenceResult struct {
	Op         string         `json:"op"`
	ReqID      string         `json:"req_id,omitempty"`
	Presence   []UserPresence `json:"presence"`
	NotVisible []string       `json:"not_visible,omitempty"`
}
