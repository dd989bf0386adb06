-- Egress, the in-sandbox API grant and git clone: a sandbox's route out and what its egress
-- carried, what code inside may call of the API, the repository cloned into it at create; what
-- a command's egress carried; a template version's egress; derived keys (a sandbox's grant:
-- its parent key, its sandbox, an expiry, a cap on the runs it starts and their count); the
-- sandbox that made an audited call. JSON fields are TEXT, as elsewhere.

ALTER TABLE sandboxes ADD COLUMN egress TEXT;
ALTER TABLE sandboxes ADD COLUMN egress_usage TEXT;
ALTER TABLE sandboxes ADD COLUMN api_grant TEXT;
ALTER TABLE sandboxes ADD COLUMN git TEXT;
ALTER TABLE commands ADD COLUMN egress_usage TEXT;
ALTER TABLE templates ADD COLUMN egress TEXT;
ALTER TABLE api_keys ADD COLUMN parent TEXT;
ALTER TABLE api_keys ADD COLUMN sandbox_id TEXT;
ALTER TABLE api_keys ADD COLUMN expires_at BIGINT;
ALTER TABLE api_keys ADD COLUMN max_runs BIGINT NOT NULL DEFAULT 0;
ALTER TABLE api_keys ADD COLUMN runs BIGINT NOT NULL DEFAULT 0;
ALTER TABLE audit ADD COLUMN actor TEXT;
