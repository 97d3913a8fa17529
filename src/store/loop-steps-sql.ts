/*
 * The loop-step store's SQL, both dialects side by side. A step is recorded with an insert that does
 * nothing when the step stands already; the caller then reads the one that stands.
 */

const COLUMNS = 'tenant_id, run_id, step, prompt_digest, response, model_id, usage, created_at';

export const RECORD = {
  postgres: `
INSERT INTO loop_steps (tenant_id, run_id, step, prompt_digest, response, model_id, usage)
VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7::jsonb)
ON CONFLICT (tenant_id, run_id, step) DO NOTHING
RETURNING ${COLUMNS}`,
  sqlite: `
INSERT INTO loop_steps (tenant_id, run_id, step, prompt_digest, response, model_id, usage, created_at)
VALUES (@tenantId, @runId, @step, @promptDigest, @response, @modelId, @usage, @at)
ON CONFLICT (tenant_id, run_id, step) DO NOTHING
RETURNING ${COLUMNS}`,
} as const;

export const GET = {
  postgres: `SELECT ${COLUMNS} FROM loop_steps WHERE tenant_id = $1 AND run_id = $2 AND step = $3`,
  sqlite: `SELECT ${COLUMNS} FROM loop_steps WHERE tenant_id = ? AND run_id = ? AND step = ?`,
} as const;

export const LIST = {
  postgres: `SELECT ${COLUMNS} FROM loop_steps WHERE tenant_id = $1 AND run_id = $2 ORDER BY step`,
  sqlite: `SELECT ${COLUMNS} FROM loop_steps WHERE tenant_id = ? AND run_id = ? ORDER BY step`,
} as const;
