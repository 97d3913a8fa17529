-- The claim takes the run claimable the longest (see the PostgreSQL migration): one index serves it
-- in order.
CREATE INDEX runs_claim ON runs (COALESCE(lease_expires_at, updated_at)) WHERE status IN ('queued', 'running');
DROP INDEX runs_claimable;

-- The sweep of waiting runs pages in (updated_at, tenant_id, run_id) order within a status: one index
-- on exactly that serves each page.
CREATE INDEX runs_waiting ON runs (status, updated_at, tenant_id, run_id)
  WHERE status IN ('awaiting_approval', 'awaiting_reconciliation');
DROP INDEX runs_awaiting;
