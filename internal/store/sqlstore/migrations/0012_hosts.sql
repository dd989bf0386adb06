-- Hosts of a fleet (internal/fleet): the host agents a control plane places sandboxes on,
-- what each offers (capacity, JSON), when it last answered and its state (up, lost).
CREATE TABLE hosts (
	id TEXT PRIMARY KEY,
	url TEXT NOT NULL,
	state TEXT NOT NULL,
	capacity TEXT,
	last_heartbeat BIGINT NOT NULL,
	registered_at BIGINT NOT NULL
);
-- Which host holds a sandbox's state (its disk, checkpoint) or a snapshot's files, so that
-- every later call for it goes there. A row goes when the sandbox is destroyed.
CREATE TABLE placements (
	id TEXT PRIMARY KEY,
	host_id TEXT NOT NULL,
	kind TEXT NOT NULL,
	placed_at BIGINT NOT NULL
);
CREATE INDEX placements_host ON placements (host_id);
-- The host a sandbox was placed on (a fleet's host id; NULL with one host agent).
ALTER TABLE sandboxes ADD COLUMN host TEXT;
