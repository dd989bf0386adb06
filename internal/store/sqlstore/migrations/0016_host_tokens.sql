-- Hosts that join a control plane (lbb host --control): the SHA-256 of each host's token,
-- printed once by lbb hosts add; NULL for hosts listed by --host-agent.
ALTER TABLE hosts ADD COLUMN token_hash TEXT;
