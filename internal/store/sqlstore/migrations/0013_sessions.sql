-- Sessions that resume anywhere: a sandbox's caller-chosen name (unique in its graph among
-- the sandboxes that have not ended), the named size its limits came from, and its disk's
-- archive in the blob store while it is stopped (JSON, and its digest apart, which the sweep of
-- unnamed blobs looks up).
ALTER TABLE sandboxes ADD COLUMN session TEXT;
ALTER TABLE sandboxes ADD COLUMN size TEXT;
ALTER TABLE sandboxes ADD COLUMN workspace TEXT;
ALTER TABLE sandboxes ADD COLUMN workspace_sha256 TEXT;
CREATE INDEX sandboxes_workspace_sha256 ON sandboxes (workspace_sha256) WHERE workspace_sha256 IS NOT NULL;
CREATE UNIQUE INDEX sandboxes_session ON sandboxes (graph, session)
	WHERE session IS NOT NULL AND status NOT IN ('destroyed', 'failed');
