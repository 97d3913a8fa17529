import {
  assertNew,
  type RecordStepRequest,
  type RecordStepResult,
  type ReserveStepRequest,
  type ReserveStepResult,
} from '../step-writes.js';
import type { ToolExecutionRecord } from '../../ledger/index.js';
import { toRecord, type ExecutionRow } from '../rows.js';
import {
  RESERVE_PARAMS,
  TRANSITIONS_PARAMS,
  reserveCtes,
  reserveParams,
  transitionsCtes,
  transitionsParams,
} from '../ledger-sql.js';
import type { PostgresLedger, Queryable } from './ledger.js';
import { prepared } from './prepared.js';
import { SAVE_PARAMS, saveCtes, saveParams } from '../runs-sql.js';

/*
 * A run-loop step's two writes, each one statement: a round trip and a commit, where a transaction of
 * the same writes costs four or five round trips (BEGIN, each statement, COMMIT). The statements are
 * the parts' own (SAVE, RESERVE, TRANSITIONS) joined as common table expressions, so they decide
 * nothing the parts do not. The writes of different runs that arrive together go as one statement
 * of several such parts (group-commit.ts).
 */

/** The response's checkpoint saved (fenced, the lease renewed), then its calls reserved, only if saved. */
const reserveStepCtes = (at: number): string =>
  `${saveCtes(at)}, ${reserveCtes(at + SAVE_PARAMS, 'EXISTS (SELECT 1 FROM saved)')}`;
const RESERVE_STEP_SELECT =
  'SELECT saved.checkpoint_version AS step_version, up.* FROM saved LEFT JOIN up ON true';
const RESERVE_STEP_PARAMS = SAVE_PARAMS + RESERVE_PARAMS;

/** The step's outcomes, then the checkpoint that tells them, saved only if every outcome applied. */
const recordStepCtes = (at: number): string =>
  `${transitionsCtes(at)}, ${saveCtes(
    at + TRANSITIONS_PARAMS,
    ` AND (SELECT count(*) FROM u) = $${at + TRANSITIONS_PARAMS + SAVE_PARAMS}`,
  )}`;
const RECORD_STEP_SELECT = `SELECT (SELECT checkpoint_version FROM saved) AS step_version, u.*
FROM (VALUES (1)) AS one (x) LEFT JOIN u ON true`;
const RECORD_STEP_PARAMS = TRANSITIONS_PARAMS + SAVE_PARAMS + 1;

const RESERVE_STEP = `WITH ${reserveStepCtes(1)}
${RESERVE_STEP_SELECT}`;
const RECORD_STEP = `WITH ${recordStepCtes(1)}
${RECORD_STEP_SELECT}`;

/** The common table expressions the step statements name; a group's part k names them `<name>_k`. */
const CTE_NAMES = /\b(clock|req|up|ev|saved|saved_msg|saved_ev|locked|u)\b/g;

/**
 * Step writes of one kind as one statement: part k is the single statement's common table
 * expressions with their names suffixed `_k` and their parameters numbered after part k-1's, and its
 * rows are the single statement's, tagged `part` k. The parts share nothing but the statement (a
 * group touches no run or key twice), so each decides what it would alone.
 */
export function groupedStatement(
  ctes: (at: number) => string,
  select: string,
  params: number,
  parts: number,
): string {
  const texts = Array.from({ length: parts }, (_, i) => {
    const rename = (text: string): string => text.replace(CTE_NAMES, `$1_${i + 1}`);
    return {
      ctes: rename(ctes(1 + i * params)),
      select: rename(select).replace(/^SELECT /, `SELECT ${i + 1} AS part, `),
    };
  });
  return `WITH ${texts.map((t) => t.ctes).join(',\n')}
${texts.map((t) => t.select).join('\nUNION ALL\n')}`;
}

/** The statement of `parts` reservation steps, made once per size. */
const reserveGroups = new Map<number, string>();
const recordGroups = new Map<number, string>();
function statementOf(cache: Map<number, string>, parts: number, make: () => string): string {
  let text = cache.get(parts);
  if (text === undefined) {
    text = make();
    cache.set(parts, text);
  }
  return text;
}

/** The statement of a group of `parts` step writes of a kind (its plans are tested). */
export function stepGroupStatement(kind: 'reserve' | 'record', parts: number): string {
  return kind === 'reserve'
    ? statementOf(reserveGroups, parts, () =>
        groupedStatement(reserveStepCtes, RESERVE_STEP_SELECT, RESERVE_STEP_PARAMS, parts),
      )
    : statementOf(recordGroups, parts, () =>
        groupedStatement(recordStepCtes, RECORD_STEP_SELECT, RECORD_STEP_PARAMS, parts),
      );
}

type StepRow = ExecutionRow & { step_version: string | null; n?: string | null };
type PartRow = StepRow & { part: number };

export function reserveStepParams(request: ReserveStepRequest): unknown[] {
  const { reservations } = request;
  assertNew(reservations);
  const first = reservations[0];
  if (first === undefined || reservations.some((r) => r.tenantId !== first.tenantId)) {
    throw new Error('a step reserves one or more calls of one tenant');
  }
  return [...saveParams(request.save), ...reserveParams(reservations, request.actor)];
}

async function reserveStepAnswer(
  ledger: PostgresLedger,
  request: ReserveStepRequest,
  rows: readonly StepRow[],
): Promise<ReserveStepResult> {
  const saved = rows[0];
  if (saved === undefined) return undefined;
  const held = new Map<string, ToolExecutionRecord>();
  for (const row of rows) if (row.idempotency_key !== null) held.set(row.idempotency_key, toRecord(row));
  return {
    version: Number(saved.step_version),
    reservations: await ledger.answer(request.reservations, held),
  };
}

export function recordStepParams(request: RecordStepRequest): unknown[] {
  return [...transitionsParams(request.transitions), ...saveParams(request.save), request.transitions.length];
}

async function recordStepAnswer(
  ledger: PostgresLedger,
  request: RecordStepRequest,
  rows: readonly StepRow[],
): Promise<RecordStepResult> {
  const { transitions } = request;
  const version = rows[0]?.step_version ?? null;
  const applied = rows.filter((row) => row.idempotency_key !== null);
  const results = await ledger.resultsOf(
    transitions,
    applied.map((row) => ({ ...row, n: row.n ?? null })),
  );
  if (applied.length !== transitions.length) return { results, version: null };
  return { results, version: version === null ? undefined : Number(version) };
}

export async function reserveStep(
  db: Queryable,
  ledger: PostgresLedger,
  request: ReserveStepRequest,
): Promise<ReserveStepResult> {
  const params = reserveStepParams(request);
  const { rows } = await db.query<StepRow>(prepared('oncely_reserve_step', RESERVE_STEP), params);
  return reserveStepAnswer(ledger, request, rows);
}

export async function recordStep(
  db: Queryable,
  ledger: PostgresLedger,
  request: RecordStepRequest,
): Promise<RecordStepResult> {
  const params = recordStepParams(request);
  const { rows } = await db.query<StepRow>(prepared('oncely_record_step', RECORD_STEP), params);
  return recordStepAnswer(ledger, request, rows);
}

/** Rows of a grouped statement, by part (0-based, as the requests). */
function byPart(rows: readonly PartRow[], parts: number): StepRow[][] {
  const out: StepRow[][] = Array.from({ length: parts }, () => []);
  for (const row of rows) out[Number(row.part) - 1]!.push(row);
  return out;
}

/** Several runs' `reserveStep`s as one statement (each request checked as it would be alone). */
export async function reserveSteps(
  db: Queryable,
  ledger: PostgresLedger,
  requests: readonly ReserveStepRequest[],
): Promise<ReserveStepResult[]> {
  const params = requests.flatMap(reserveStepParams);
  const text = stepGroupStatement('reserve', requests.length);
  const { rows } = await db.query<PartRow>(prepared(`oncely_reserve_steps_${requests.length}`, text), params);
  const parts = byPart(rows, requests.length);
  return Promise.all(requests.map((request, i) => reserveStepAnswer(ledger, request, parts[i]!)));
}

/** Several runs' `recordStep`s as one statement. */
export async function recordSteps(
  db: Queryable,
  ledger: PostgresLedger,
  requests: readonly RecordStepRequest[],
): Promise<RecordStepResult[]> {
  const params = requests.flatMap(recordStepParams);
  const text = stepGroupStatement('record', requests.length);
  const { rows } = await db.query<PartRow>(prepared(`oncely_record_steps_${requests.length}`, text), params);
  const parts = byPart(rows, requests.length);
  return Promise.all(requests.map((request, i) => recordStepAnswer(ledger, request, parts[i]!)));
}
