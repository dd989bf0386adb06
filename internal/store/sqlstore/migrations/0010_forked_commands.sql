-- A fork's copy of a command that ran in its source when the snapshot was taken: the source
-- command's id.
ALTER TABLE commands ADD COLUMN forked_from TEXT;
