-- The claim takes the run claimable the longest (see the PostgreSQL migration): one index serves it
-- in order.
CREATE INDEX runs_claim ON runs (COALESCE(lease_expires_at, updated_at)) WHERE status IN ('queued', 'running');
DROP INDEX runs_claimable;
