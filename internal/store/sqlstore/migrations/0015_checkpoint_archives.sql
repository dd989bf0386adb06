-- Snapshots and paused checkpoints in the blob store: the archive of a snapshot's directory
-- and of a paused sandbox's checkpoint (JSON, and its digest apart, which the sweep of
-- unnamed blobs looks up).
ALTER TABLE snapshots ADD COLUMN archive TEXT;
ALTER TABLE snapshots ADD COLUMN archive_sha256 TEXT;
CREATE INDEX snapshots_archive_sha256 ON snapshots (archive_sha256) WHERE archive_sha256 IS NOT NULL;
ALTER TABLE sandboxes ADD COLUMN checkpoint TEXT;
ALTER TABLE sandboxes ADD COLUMN checkpoint_sha256 TEXT;
CREATE INDEX sandboxes_checkpoint_sha256 ON sandboxes (checkpoint_sha256) WHERE checkpoint_sha256 IS NOT NULL;
