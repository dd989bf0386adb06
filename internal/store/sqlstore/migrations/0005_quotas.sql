-- Storage quotas per graph, deleting Files and the garbage collection of their blobs, and run
-- results larger than a record keeps.

-- One row per blob that Files name (a blob is shared by every File, of any graph, with its
-- bytes). Creating a File writes its blob's row (an upsert) and deleting the last File that
-- names a blob deletes it, so the two exclude each other until their transactions end: a
-- row lock in PostgreSQL, the one writer in SQLite. The blob's bytes are put in place or
-- taken away inside those transactions.
CREATE TABLE blobs (
	sha256     TEXT PRIMARY KEY,
	size       BIGINT NOT NULL,
	created_at BIGINT NOT NULL
);
INSERT INTO blobs (sha256, size, created_at) SELECT sha256, MAX(size), MIN(created_at) FROM files GROUP BY sha256;
CREATE INDEX files_sha256 ON files (sha256);

-- The size of a paused sandbox's checkpoint (0 unless it is paused with one), and the
-- per-graph counts of sandboxes by status.
ALTER TABLE sandboxes ADD COLUMN checkpoint_bytes BIGINT NOT NULL DEFAULT 0;
CREATE INDEX sandboxes_graph_status ON sandboxes (graph, status);

-- A result larger than the server's --max-result-bytes is not kept in the record: its size,
-- and the File of the graph that holds it.
ALTER TABLE commands ADD COLUMN result_truncated INTEGER NOT NULL DEFAULT 0;
ALTER TABLE commands ADD COLUMN result_bytes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE commands ADD COLUMN result_file TEXT;
