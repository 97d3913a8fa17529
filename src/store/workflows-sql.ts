/*
 * The workflow store's SQL, both dialects side by side. PostgreSQL reads the clock with oncely_now();
 * SQLite is given the time by the caller (ISO strings, which order as times do).
 */

export const WORKFLOW_RUN_COLUMNS = `tenant_id, workflow_run_id, workflow, input, input_digest, status, status_reason,
  result, error, version, lease_owner, lease_epoch, lease_expires_at, wake_at, created_at, updated_at`;

export const WORKFLOW_EVENT_COLUMNS =
  'id, tenant_id, workflow_run_id, at, kind, node, attempt, run_id, reason, detail';

export const CREATE_WORKFLOW_RUN = {
  postgres: `
WITH made AS (
  INSERT INTO workflow_runs (tenant_id, workflow_run_id, workflow, input, input_digest, status)
  VALUES ($1, $2, $3, $4::jsonb, $5, 'running')
  ON CONFLICT (tenant_id, workflow_run_id) DO NOTHING
  RETURNING ${WORKFLOW_RUN_COLUMNS}
), started AS (
  INSERT INTO workflow_events (tenant_id, workflow_run_id, kind, detail)
  SELECT tenant_id, workflow_run_id, 'workflow.started', jsonb_build_object('workflow', workflow) FROM made
)
SELECT ${WORKFLOW_RUN_COLUMNS} FROM made`,
  sqlite: `
INSERT INTO workflow_runs (tenant_id, workflow_run_id, workflow, input, input_digest, status, wake_at,
  created_at, updated_at)
VALUES (@tenantId, @workflowRunId, @workflow, @input, @inputDigest, 'running', @at, @at, @at)
ON CONFLICT (tenant_id, workflow_run_id) DO NOTHING
RETURNING ${WORKFLOW_RUN_COLUMNS}`,
} as const;

export const GET_WORKFLOW_RUN = {
  postgres: `SELECT ${WORKFLOW_RUN_COLUMNS} FROM workflow_runs WHERE tenant_id = $1 AND workflow_run_id = $2`,
  sqlite: `SELECT ${WORKFLOW_RUN_COLUMNS} FROM workflow_runs WHERE tenant_id = ? AND workflow_run_id = ?`,
} as const;

/** Filters are parameters that may be null (no filter), so the statement is one text. */
export const LIST_WORKFLOW_RUNS = {
  postgres: `
SELECT ${WORKFLOW_RUN_COLUMNS} FROM workflow_runs
 WHERE tenant_id = $1
   AND ($2::text[] IS NULL OR status = ANY($2::text[]))
   AND ($3::text IS NULL OR workflow = $3)
   AND ($4::timestamptz IS NULL OR (created_at, workflow_run_id) < ($4::timestamptz, $5::text))
 ORDER BY created_at DESC, workflow_run_id DESC
 LIMIT $6`,
  sqlite: `
SELECT ${WORKFLOW_RUN_COLUMNS} FROM workflow_runs
 WHERE tenant_id = @tenantId
   AND (@statuses IS NULL OR status IN (SELECT value FROM json_each(@statuses)))
   AND (@workflow IS NULL OR workflow = @workflow)
   AND (@beforeAt IS NULL OR created_at < @beforeAt OR (created_at = @beforeAt AND workflow_run_id < @beforeId))
 ORDER BY created_at DESC, workflow_run_id DESC
 LIMIT @limit`,
} as const;

export const WORKFLOW_EVENTS = {
  postgres: `SELECT ${WORKFLOW_EVENT_COLUMNS} FROM workflow_events
 WHERE tenant_id = $1 AND workflow_run_id = $2 AND id > $3 ORDER BY id`,
  sqlite: `SELECT ${WORKFLOW_EVENT_COLUMNS} FROM workflow_events
 WHERE tenant_id = ? AND workflow_run_id = ? AND id > ? ORDER BY id`,
} as const;

/** A node's event of a kind and attempt that stands already is left as it is (the unique index). */
export const APPEND_WORKFLOW_EVENT = {
  sqlite: `
INSERT INTO workflow_events (tenant_id, workflow_run_id, at, kind, node, attempt, run_id, reason, detail)
VALUES (@tenantId, @workflowRunId, @at, @kind, @node, @attempt, @runId, @reason, @detail)
ON CONFLICT DO NOTHING`,
} as const;

/*
 * A wake-up while a workflow run is claimed must not be lost: the claim moves `wake_at` to the end
 * of its lease, a wake (a node run ended) brings it back to now, and the advance keeps a `wake_at`
 * that is due (the run is looked at again at once) rather than setting its own later time over it.
 */
export const CLAIM_DUE_WORKFLOWS = {
  postgres: `
UPDATE workflow_runs w
   SET lease_owner = $1, lease_epoch = w.lease_epoch + 1,
       lease_expires_at = oncely_now() + ($2::integer * interval '1 millisecond'),
       wake_at = oncely_now() + ($2::integer * interval '1 millisecond'), updated_at = oncely_now()
 WHERE (w.tenant_id, w.workflow_run_id) IN (
   SELECT tenant_id, workflow_run_id FROM workflow_runs
    WHERE status = 'running' AND wake_at <= oncely_now()
      AND (lease_expires_at IS NULL OR lease_expires_at < oncely_now())
    ORDER BY wake_at
    LIMIT $3
    FOR UPDATE SKIP LOCKED)
RETURNING ${WORKFLOW_RUN_COLUMNS.replace(/(\w+)/g, 'w.$1')}`,
  sqlite: `
UPDATE workflow_runs
   SET lease_owner = @owner, lease_epoch = lease_epoch + 1, lease_expires_at = @expiresAt,
       wake_at = @expiresAt, updated_at = @at
 WHERE rowid IN (
   SELECT rowid FROM workflow_runs
    WHERE status = 'running' AND wake_at <= @at AND (lease_expires_at IS NULL OR lease_expires_at < @at)
    ORDER BY wake_at
    LIMIT @limit)
RETURNING ${WORKFLOW_RUN_COLUMNS}`,
} as const;

/** The events of an advance or a move, as rows of a JSON array ($n), appended with it or not at all. */
const PG_EVENTS_OF = (param: string, moved: string): string => `
appended AS (
  INSERT INTO workflow_events (tenant_id, workflow_run_id, kind, node, attempt, run_id, reason, detail)
  SELECT m.tenant_id, m.workflow_run_id, e.kind, e.node, e.attempt, e.run_id, e.reason, e.detail
    FROM ${moved} m, jsonb_to_recordset(${param}::jsonb)
      AS e(kind text, node text, attempt integer, run_id text, reason text, detail jsonb, n integer)
   ORDER BY e.n
  ON CONFLICT DO NOTHING)`;

export const ADVANCE_WORKFLOW = {
  postgres: `
WITH moved AS (
UPDATE workflow_runs
   SET status = $4, status_reason = $5, result = COALESCE($6::jsonb, result), error = COALESCE($7::jsonb, error),
       wake_at = CASE WHEN wake_at <= oncely_now() THEN wake_at
                      ELSE oncely_now() + ($8::integer * interval '1 millisecond') END,
       version = version + 1,
       lease_owner = NULL, lease_expires_at = NULL, updated_at = oncely_now()
 WHERE tenant_id = $1 AND workflow_run_id = $2 AND lease_epoch = $3 AND lease_owner IS NOT NULL
   AND status = 'running'
RETURNING tenant_id, workflow_run_id),
${PG_EVENTS_OF('$9', 'moved')}
SELECT count(*)::int AS moved FROM moved`,
  sqlite: `
UPDATE workflow_runs
   SET status = @status, status_reason = @statusReason, result = COALESCE(@result, result),
       error = COALESCE(@error, error), wake_at = CASE WHEN wake_at <= @at THEN wake_at ELSE @wakeAt END,
       version = version + 1,
       lease_owner = NULL, lease_expires_at = NULL, updated_at = @at
 WHERE tenant_id = @tenantId AND workflow_run_id = @workflowRunId AND lease_epoch = @epoch
   AND lease_owner IS NOT NULL AND status = 'running'
RETURNING version`,
} as const;

export const MOVE_WORKFLOW = {
  postgres: `
WITH moved AS (
UPDATE workflow_runs
   SET status = $4, status_reason = $5, error = COALESCE($6::jsonb, error), version = version + 1,
       lease_epoch = lease_epoch + 1, lease_owner = NULL, lease_expires_at = NULL,
       wake_at = oncely_now(), updated_at = oncely_now()
 WHERE tenant_id = $1 AND workflow_run_id = $2 AND status = ANY($3::text[])
RETURNING ${WORKFLOW_RUN_COLUMNS}),
${PG_EVENTS_OF('$7', 'moved')}
SELECT ${WORKFLOW_RUN_COLUMNS} FROM moved`,
  sqlite: `
UPDATE workflow_runs
   SET status = @to, status_reason = @statusReason, error = COALESCE(@error, error), version = version + 1,
       lease_epoch = lease_epoch + 1, lease_owner = NULL, lease_expires_at = NULL,
       wake_at = @at, updated_at = @at
 WHERE tenant_id = @tenantId AND workflow_run_id = @workflowRunId
   AND status IN (SELECT value FROM json_each(@from))
RETURNING ${WORKFLOW_RUN_COLUMNS}`,
} as const;

export const WAKE_WORKFLOW = {
  postgres: `UPDATE workflow_runs SET wake_at = oncely_now()
 WHERE tenant_id = $1 AND workflow_run_id = $2 AND status = 'running' AND wake_at > oncely_now()`,
  sqlite: `UPDATE workflow_runs SET wake_at = @at
 WHERE tenant_id = @tenantId AND workflow_run_id = @workflowRunId AND status = 'running' AND wake_at > @at`,
} as const;
