-- Previews: the signed URLs given out for ports of sandboxes. A URL names its row; deleting
-- the row revokes the URL. The janitor removes rows a day past their expiry.

CREATE TABLE previews (
	id          TEXT PRIMARY KEY,
	graph       TEXT NOT NULL,
	sandbox_id  TEXT NOT NULL,
	port        INTEGER NOT NULL,
	expires_at  BIGINT NOT NULL,
	created_at  BIGINT NOT NULL,
	origin_key  TEXT
);
CREATE INDEX previews_graph_sandbox ON previews (graph, sandbox_id, id);
