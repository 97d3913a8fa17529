import { FEATURE_NOT_SUPPORTED } from './sqlstate.js';

/*
 * The hot statements (a guarded call's, a run step's) are prepared once per connection under a name
 * and run under one generic plan the server keeps (the store sends them on connections of their own,
 * with `plan_cache_mode=force_generic_plan` and sequential scans off: HOT_SETTINGS in
 * postgres-store.ts): each is planned once per connection instead of at every execution, where
 * planning a step's statement cost more than running it.
 *
 * A generic plan is made without the values, from what the server knows of the tables when it is
 * made. The statements are written so that, on a table of any size, with statistics or without, the
 * only cheap plan is one primary-key lookup per key: joins reach the ledger row by row (LATERAL), and
 * the table being written has no restriction of its own a listing index could serve (the claim of
 * the next run reads its own index, in the order it claims). On a table of a few pages the costs
 * tie and the server may pick a listing index, which costs nothing there but would cost a scan of
 * the tenant once the table has grown; and a sequential scan, cheapest on a table of a few pages,
 * would read the whole table once it had grown, which is why those connections have them off. So
 * each statement is prepared anew (and planned again, on the table as it then is) each time its
 * count of executions in this process doubles past REPLAN_FROM; the server also plans again after
 * every ANALYZE of its tables.
 * test/store/plans.test.ts checks the plans.
 */

/**
 * The count of executions from which a statement is prepared anew at each doubling: early, so the
 * plans a worker made on a new database (tables of a few rows) are made again while the tables grow
 * (after 16, 32, 64, ... executions: a planning per connection each time, some twenty in a lifetime).
 */
export const REPLAN_FROM = 16;

interface Statement {
  readonly text: string;
  executions: number;
  generation: number;
}

const statements = new Map<string, Statement>();
/** Moves on when the server refused a plan whose table changed: every statement is prepared anew. */
let epoch = 1;

/** A hot statement under its name for now: `oncely_save_1_3`. Its text must depend on `name` alone. */
export function prepared(name: string, text: string): { name: string; text: string } {
  let statement = statements.get(name);
  if (statement === undefined) {
    statement = { text, executions: 0, generation: 1 };
    statements.set(name, statement);
  }
  statement.executions += 1;
  const n = statement.executions;
  if (n >= REPLAN_FROM && (n & (n - 1)) === 0) statement.generation += 1;
  return { name: `${name}_${epoch}_${statement.generation}`, text };
}

/** The hot statements this process has run, by name, with their texts (their plans are tested). */
export function hotStatements(): ReadonlyMap<string, string> {
  return new Map([...statements].map(([name, s]) => [name, s.text]));
}

/**
 * Whether the server refused a prepared statement whose table changed its columns (DDL by hand; a
 * newer schema refuses writes anyway); if so every statement is prepared anew on the next try.
 */
export function renewIfStalePlan(error: unknown): boolean {
  const { code, message } = (error ?? {}) as { code?: unknown; message?: unknown };
  if (code !== FEATURE_NOT_SUPPORTED || typeof message !== 'string') return false;
  if (!message.includes('cached plan must not change result type')) return false;
  epoch += 1;
  return true;
}
