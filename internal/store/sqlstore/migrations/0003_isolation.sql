-- Isolation per sandbox and per template version: the driver a sandbox runs on ("ns",
-- "gvisor"), always the resolved name; a template version's is what its runs default to
-- ('' or NULL: the server's default). Sandboxes recorded before this migration have ''.

ALTER TABLE sandboxes ADD COLUMN isolation TEXT NOT NULL DEFAULT '';
ALTER TABLE templates ADD COLUMN isolation TEXT;
