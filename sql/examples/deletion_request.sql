-- A deletion request, end to end: production requests feed an eval dataset;
-- deleting a user's requests removes them from every derived view at once,
-- and compaction then removes them from storage.
--
-- Run with psql against a server: psql -h 127.0.0.1 -p 5455 -f sql/examples/deletion_request.sql

CREATE TABLE requests (
    request_id TEXT PRIMARY KEY,
    user_id    TEXT,
    prompt     TEXT,
    response   TEXT,
    created_at TIMESTAMP
) WITH (partitions = 4, delete_retention = '0s');

-- The eval dataset: requests that pass a quality rule.
CREATE MATERIALIZED VIEW eval_set AS
    SELECT request_id, user_id, prompt, response
    FROM requests
    WHERE length(response) >= 20;

CREATE MATERIALIZED VIEW per_user AS
    SELECT user_id, COUNT(*) AS requests, MAX(created_at) AS last_request
    FROM requests
    GROUP BY user_id;

-- load
INSERT INTO requests VALUES
    ('req-1', 'u1', 'What is a watermark?', 'The point in event time up to which ...', '2026-11-29 10:00:00'),
    ('req-2', 'u42', 'my private question', 'an answer that is long enough', '2026-11-29 10:01:00'),
    ('req-3', 'u42', 'another private one', 'short', '2026-11-29 10:02:00');

-- delete
DELETE FROM requests WHERE user_id = 'u42';
FLUSH;

-- check
SELECT COUNT(*) AS u42_rows_in_eval_set FROM eval_set WHERE user_id = 'u42';   -- 0
SELECT * FROM per_user ORDER BY user_id;                                         -- no u42

-- After the grace period (delete_retention; 0s here), compaction rewrites the
-- table's closed segments without u42's records; VACUUM runs it now. (In this
-- small example every record is still in the active segment, which
-- compaction leaves until it closes by size or age.)
VACUUM requests;
SELECT partition, dirty_ratio, compactions, compacted_records, compaction_progress
FROM sluice_catalog.partitions WHERE table_name = 'requests';
