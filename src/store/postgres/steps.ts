import {
  assertNew,
  type RecordStepRequest,
  type RecordStepResult,
  type ReserveStepRequest,
  type ReserveStepResult,
} from '../step-writes.js';
import type { ToolExecutionRecord } from '../../ledger/index.js';
import { toRecord, type ExecutionRow } from '../rows.js';
import { reserveCtes, reserveParams, transitionsCtes, transitionsParams } from '../ledger-sql.js';
import type { PostgresLedger, Queryable } from './ledger.js';
import { prepared } from './prepared.js';
import { SAVE_PARAMS, saveCtes, saveParams } from '../runs-sql.js';

/*
 * A run-loop step's two writes, each one statement: a round trip and a commit, where a transaction of
 * the same writes costs four or five round trips (BEGIN, each statement, COMMIT). The statements are
 * the parts' own (SAVE, RESERVE, TRANSITIONS) joined as common table expressions, so they decide
 * nothing the parts do not.
 */

/** The response's checkpoint saved (fenced, the lease renewed), then its calls reserved, only if saved. */
const RESERVE_STEP = `WITH ${saveCtes(1)}, ${reserveCtes(SAVE_PARAMS + 1, 'EXISTS (SELECT 1 FROM saved)')}
SELECT saved.checkpoint_version AS step_version, up.* FROM saved LEFT JOIN up ON true`;

/** The step's outcomes, then the checkpoint that tells them, saved only if every outcome applied. */
const RECORD_STEP = `WITH ${transitionsCtes(1)}, ${saveCtes(17, ` AND (SELECT count(*) FROM u) = $${17 + SAVE_PARAMS}`)}
SELECT (SELECT checkpoint_version FROM saved) AS step_version, u.*
FROM (VALUES (1)) AS one (x) LEFT JOIN u ON true`;

type StepRow = ExecutionRow & { step_version: string | null; n?: string | null };

export async function reserveStep(
  db: Queryable,
  ledger: PostgresLedger,
  request: ReserveStepRequest,
): Promise<ReserveStepResult> {
  const { reservations } = request;
  assertNew(reservations);
  const first = reservations[0];
  if (first === undefined || reservations.some((r) => r.tenantId !== first.tenantId)) {
    throw new Error('a step reserves one or more calls of one tenant');
  }
  const { rows } = await db.query<StepRow>(prepared('oncely_reserve_step', RESERVE_STEP), [
    ...saveParams(request.save),
    ...reserveParams(reservations, request.actor),
  ]);
  const saved = rows[0];
  if (saved === undefined) return undefined;
  const held = new Map<string, ToolExecutionRecord>();
  for (const row of rows) if (row.idempotency_key !== null) held.set(row.idempotency_key, toRecord(row));
  return { version: Number(saved.step_version), reservations: await ledger.answer(reservations, held) };
}

export async function recordStep(
  db: Queryable,
  ledger: PostgresLedger,
  request: RecordStepRequest,
): Promise<RecordStepResult> {
  const { transitions } = request;
  const { rows } = await db.query<StepRow>(prepared('oncely_record_step', RECORD_STEP), [
    ...transitionsParams(transitions),
    ...saveParams(request.save),
    transitions.length,
  ]);
  const version = rows[0]?.step_version ?? null;
  const applied = rows.filter((row) => row.idempotency_key !== null);
  const results = await ledger.resultsOf(
    transitions,
    applied.map((row) => ({ ...row, n: row.n ?? null })),
  );
  if (applied.length !== transitions.length) return { results, version: null };
  return { results, version: version === null ? undefined : Number(version) };
}
