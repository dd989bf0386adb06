-- Pause, snapshot and fork: how a paused sandbox was paused (so that resume knows, also after
-- a restart), where a fork came from, and the snapshots forks start from. A snapshot's bytes
-- are a directory under the data directory, named by its id.

ALTER TABLE sandboxes ADD COLUMN paused_at BIGINT;
ALTER TABLE sandboxes ADD COLUMN pause_mode TEXT;
ALTER TABLE sandboxes ADD COLUMN forked_from TEXT;

CREATE TABLE snapshots (
	id          TEXT PRIMARY KEY,
	graph       TEXT NOT NULL,
	sandbox_id  TEXT NOT NULL,
	isolation   TEXT NOT NULL,
	memory      INTEGER NOT NULL DEFAULT 0,
	size_bytes  BIGINT NOT NULL DEFAULT 0,
	metadata    TEXT,
	created_at  BIGINT NOT NULL,
	duration_ms DOUBLE PRECISION NOT NULL DEFAULT 0
);
CREATE INDEX snapshots_graph_sandbox ON snapshots (graph, sandbox_id, id);
CREATE INDEX snapshots_sandbox ON snapshots (sandbox_id);
