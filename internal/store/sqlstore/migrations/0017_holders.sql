-- Control planes sharing one store (docs/deploy.md): each heartbeats its row; one whose
-- heartbeat is older than --peer-dead-after is dead, and one live peer adopts it (adopted_by,
-- set once by a conditional update), recovers what it held and takes its records
-- (recovered_at). The row '' stands for the records from before holders: dead, adopted once.
CREATE TABLE control_planes (
	id           TEXT PRIMARY KEY,
	started_at   BIGINT NOT NULL,
	heartbeat_at BIGINT NOT NULL,
	adopted_by   TEXT NOT NULL DEFAULT '',
	adopted_at   BIGINT,
	recovered_at BIGINT
);
INSERT INTO control_planes (id, started_at, heartbeat_at) VALUES ('', 0, 0);
-- The control plane that holds a record: its start (or its adopter) recovers it.
ALTER TABLE commands ADD COLUMN holder TEXT NOT NULL DEFAULT '';
ALTER TABLE sandboxes ADD COLUMN holder TEXT NOT NULL DEFAULT '';
ALTER TABLE idempotency ADD COLUMN holder TEXT NOT NULL DEFAULT '';
CREATE INDEX commands_holder ON commands (holder, status);
CREATE INDEX sandboxes_holder ON sandboxes (holder, status);
CREATE INDEX idempotency_holder ON idempotency (holder, state);
