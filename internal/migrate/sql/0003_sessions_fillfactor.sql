-- Every persister batch updates its sessions' rows: leave room on each page
-- so those updates stay HOT (no new index entries per row version).
ALTER TABLE sessions SET (fillfactor = 70);
