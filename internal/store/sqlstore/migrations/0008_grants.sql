-- Grants, budgets and metering (issue 17). A grant is a short-lived derived key (api_keys,
-- kind 'grant') for one graph, with the workflow step it authorizes (origin) and a budget;
-- only its secret's hash is kept, as for every key. A budget's limits and what was used
-- under it are numbers, so that an admission is one conditional UPDATE. A command's usage
-- and the budget left after it are on its record (JSON), and each ended command adds one
-- row to the usage ledger that GET /v1/usage sums.

ALTER TABLE api_keys ADD COLUMN kind TEXT;
ALTER TABLE api_keys ADD COLUMN origin TEXT;
ALTER TABLE api_keys ADD COLUMN budget_vcpu_ms DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN budget_gib_ms DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN used_vcpu_ms DOUBLE PRECISION NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN used_gib_ms DOUBLE PRECISION NOT NULL DEFAULT 0;

-- A key's spend cap (JSON): CPU time, memory over time or cost, per day, month or in all.
ALTER TABLE api_keys ADD COLUMN spend_cap TEXT;
ALTER TABLE commands ADD COLUMN usage TEXT;
ALTER TABLE commands ADD COLUMN budget_left TEXT;

-- The budget of one run of a workflow (PUT /v1/budgets/{workflow}/{run}).
CREATE TABLE budgets (
	graph         TEXT NOT NULL,
	workflow      TEXT NOT NULL,
	run           TEXT NOT NULL,
	max_runs      BIGINT NOT NULL DEFAULT 0,
	max_vcpu_ms   DOUBLE PRECISION NOT NULL DEFAULT 0,
	max_gib_ms    DOUBLE PRECISION NOT NULL DEFAULT 0,
	runs          BIGINT NOT NULL DEFAULT 0,
	vcpu_ms       DOUBLE PRECISION NOT NULL DEFAULT 0,
	gib_ms        DOUBLE PRECISION NOT NULL DEFAULT 0,
	created_at    BIGINT NOT NULL,
	updated_at    BIGINT NOT NULL,
	PRIMARY KEY (graph, workflow, run)
);

-- One row per ended command: what it used, and who and what it ran for.
CREATE TABLE usage_ledger (
	command_id TEXT PRIMARY KEY,
	graph      TEXT NOT NULL,
	sandbox_id TEXT NOT NULL,
	key_id     TEXT,
	grant_id   TEXT,
	workflow   TEXT,
	run        TEXT,
	template   TEXT,
	at         BIGINT NOT NULL,
	vcpu_ms    DOUBLE PRECISION NOT NULL,
	gib_ms     DOUBLE PRECISION NOT NULL
);
CREATE INDEX usage_ledger_graph_at ON usage_ledger (graph, at);
CREATE INDEX usage_ledger_key_at ON usage_ledger (key_id, at);
