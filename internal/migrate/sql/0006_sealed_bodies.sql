-- Sealed bodies (crypto-shredding, internal/keystore, docs/erasure.md): a
-- message's or edit's body may be sealed with a data key; body_key_id
-- names it (NULL: the body is plaintext), edited_body_key_id the key of
-- edited_body. The store keeps bodies sealed as the log holds them: the
-- gateway opens them for sync, and destroying a key erases the store's
-- copy with the log's. Nullable columns without a default: adding them
-- rewrites no rows.
ALTER TABLE messages ADD COLUMN body_key_id bigint, ADD COLUMN edited_body_key_id bigint;
