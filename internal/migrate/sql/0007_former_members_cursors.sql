-- A member who left a session no longer has read or delivery cursors in
-- it (internal/store, memberRemove): the cursors kept from before this
-- rule are dropped, so a store written before it equals one rebuilt after
-- it, and an erased user's cursors (their erasure leaves every session)
-- are gone too.
DELETE FROM read_cursors c USING session_members m
WHERE m.session_id = c.session_id AND m.user_id = c.user_id AND m.left_seq IS NOT NULL;
DELETE FROM delivery_cursors c USING session_members m
WHERE m.session_id = c.session_id AND m.user_id = c.user_id AND m.left_seq IS NOT NULL;
