-- Files of the graph: content-addressed (the bytes are in the blob store under their sha256),
-- outliving sandboxes, each naming its origin.

CREATE TABLE files (
	id         TEXT PRIMARY KEY,
	graph      TEXT NOT NULL,
	sha256     TEXT NOT NULL,
	size       BIGINT NOT NULL,
	name       TEXT,
	origin     TEXT,
	created_at BIGINT NOT NULL
);
CREATE INDEX files_graph_id ON files (graph, id);
CREATE INDEX files_graph_sha256 ON files (graph, sha256);
