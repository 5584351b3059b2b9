package wire

// OpSettings reads the caller's account settings and, with a field set,
// changes it (docs/protocol.md, "Read receipts off"). Settings are account
// state kept by the gateways in Redis, never sequenced.
const OpSettings = "settings"

// SettingsResult answers settings with the settings in effect after it.
type SettingsResult struct {
	Op    string `json:"op"`
	ReqID string `json:"req_id,omitempty"`
	// ReadReceipts: the user's read cursors are shown to the other members
	// (receipt frames of kind read, seen_by). Off, they still move the
	// user's own unread counts.
	ReadReceipts bool `json:"read_receipts"`
}
