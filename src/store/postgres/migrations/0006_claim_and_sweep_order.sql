-- The claim takes the run claimable the longest: a queued run from when it was queued (or the time it
-- was let go until), a running one from when its lease expired. One index on that time, among queued
-- and running runs, serves it in order (the old one, on status and lease expiry, made every claim
-- sort the backlog).
CREATE INDEX runs_claim ON runs ((COALESCE(lease_expires_at, updated_at))) WHERE status IN ('queued', 'running');
DROP INDEX runs_claimable;

-- The sweep of waiting runs pages through each waiting status in (updated_at, tenant_id, run_id)
-- order: an index on exactly that, among waiting runs, serves each page as a range of it.
CREATE INDEX runs_waiting ON runs (status, updated_at, tenant_id, run_id)
  WHERE status IN ('awaiting_approval', 'awaiting_reconciliation');
DROP INDEX runs_awaiting;
