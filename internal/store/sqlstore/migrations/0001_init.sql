-- The first schema: graphs, keys, sandboxes, commands, templates, idempotency, audit.
-- Times are BIGINT Unix milliseconds; structured fields are JSON text.

CREATE TABLE graphs (
	name       TEXT PRIMARY KEY,
	created_at BIGINT NOT NULL
);

CREATE TABLE api_keys (
	id         TEXT PRIMARY KEY,
	name       TEXT NOT NULL,
	hash       TEXT NOT NULL UNIQUE,
	prefix     TEXT NOT NULL,
	graphs     TEXT,
	scopes     TEXT,
	created_at BIGINT NOT NULL,
	created_by TEXT,
	revoked_at BIGINT
);

CREATE TABLE sandboxes (
	id               TEXT PRIMARY KEY,
	graph            TEXT NOT NULL,
	status           TEXT NOT NULL,
	one_call         INTEGER NOT NULL DEFAULT 0,
	base             TEXT NOT NULL,
	image            TEXT NOT NULL DEFAULT '',
	template_id      TEXT,
	template_name    TEXT,
	template_version INTEGER,
	limits           TEXT,
	env_names        TEXT,
	metadata         TEXT,
	origin           TEXT,
	created_at       BIGINT NOT NULL,
	started_at       BIGINT,
	ended_at         BIGINT,
	expires_at       BIGINT,
	end_reason       TEXT,
	error            TEXT,
	vcpu_ms          DOUBLE PRECISION NOT NULL DEFAULT 0,
	gib_ms           DOUBLE PRECISION NOT NULL DEFAULT 0
);
CREATE INDEX sandboxes_graph_id ON sandboxes (graph, id);
CREATE INDEX sandboxes_status ON sandboxes (status);
CREATE INDEX sandboxes_ended_at ON sandboxes (ended_at);

CREATE TABLE commands (
	id               TEXT PRIMARY KEY,
	graph            TEXT NOT NULL,
	sandbox_id       TEXT NOT NULL,
	kind             TEXT NOT NULL,
	one_call         INTEGER NOT NULL DEFAULT 0,
	argv             TEXT,
	cwd              TEXT,
	stdin_bytes      BIGINT NOT NULL DEFAULT 0,
	language         TEXT,
	code             TEXT,
	input            TEXT,
	config           TEXT,
	template_id      TEXT,
	template_name    TEXT,
	template_version INTEGER,
	env_names        TEXT,
	timeout_ms       BIGINT NOT NULL DEFAULT 0,
	status           TEXT NOT NULL,
	ok               INTEGER NOT NULL DEFAULT 0,
	result           TEXT,
	error            TEXT,
	exit_code        INTEGER,
	signal           TEXT,
	stdout_head      TEXT NOT NULL DEFAULT '',
	stdout_tail      TEXT NOT NULL DEFAULT '',
	stdout_bytes     BIGINT NOT NULL DEFAULT 0,
	stderr_head      TEXT NOT NULL DEFAULT '',
	stderr_tail      TEXT NOT NULL DEFAULT '',
	stderr_bytes     BIGINT NOT NULL DEFAULT 0,
	output_expired   INTEGER NOT NULL DEFAULT 0,
	idempotency_key  TEXT,
	origin           TEXT,
	created_at       BIGINT NOT NULL,
	started_at       BIGINT,
	finished_at      BIGINT,
	duration_ms      BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX commands_graph_id ON commands (graph, id);
CREATE INDEX commands_sandbox ON commands (sandbox_id);
CREATE INDEX commands_status ON commands (status);
CREATE INDEX commands_finished_at ON commands (finished_at);

CREATE TABLE templates (
	id          TEXT NOT NULL,
	graph       TEXT NOT NULL,
	name        TEXT NOT NULL,
	version     INTEGER NOT NULL,
	base        TEXT NOT NULL,
	code        TEXT,
	limits      TEXT,
	timeout_ms  BIGINT NOT NULL DEFAULT 0,
	config      TEXT,
	files       TEXT,
	description TEXT,
	created_at  BIGINT NOT NULL,
	created_by  TEXT,
	PRIMARY KEY (graph, name, version)
);
CREATE INDEX templates_id ON templates (id);

CREATE TABLE idempotency (
	graph           TEXT NOT NULL,
	idem_key        TEXT NOT NULL,
	route           TEXT NOT NULL,
	request_hash    TEXT NOT NULL,
	state           TEXT NOT NULL,
	command_id      TEXT,
	sandbox_id      TEXT,
	response_status INTEGER NOT NULL DEFAULT 0,
	response_body   BLOB,
	created_at      BIGINT NOT NULL,
	completed_at    BIGINT,
	PRIMARY KEY (graph, idem_key)
);
CREATE INDEX idempotency_command ON idempotency (command_id);
CREATE INDEX idempotency_state ON idempotency (state);

CREATE TABLE audit (
	id         TEXT PRIMARY KEY,
	graph      TEXT NOT NULL,
	key_id     TEXT NOT NULL,
	method     TEXT NOT NULL,
	route      TEXT NOT NULL,
	path       TEXT NOT NULL,
	target     TEXT,
	status     INTEGER NOT NULL,
	request_id TEXT NOT NULL,
	at         BIGINT NOT NULL
);
CREATE INDEX audit_graph_id ON audit (graph, id);
