/**
 * One benchmark case: opened once per round on a fresh database (or file), timed over `ops`
 * operations at `concurrency`, then closed. Cases of one group are measured beside each other in
 * every round, in a shuffled order, and their ratios are taken within the round.
 */
export interface BenchCase {
  /** Stable id, used in the JSON and for ratios: `pg.floor.two-writes`, `peer.dbos.workflow-3`. */
  readonly id: string;
  /** What the doc's table says. */
  readonly label: string;
  /** What one operation is, for the per-second column: a call, a step, a run. */
  readonly unit: 'write' | 'read' | 'call' | 'step' | 'run';
  readonly ops: number;
  readonly concurrency: number;
  /** How many units one operation is (a run of 5 steps: 5); per-unit figures divide by it. Default 1. */
  readonly unitsPerOp?: number;
  /** `url` is a PostgreSQL URL (or a SQLite path for `sqlite.*` cases) the case may use freely. */
  open(url: string): Promise<OpenCase>;
}

export interface OpenCase {
  /** The i-th operation (0 ≤ i < ops); distinct i never share a key. */
  op(i: number): Promise<unknown>;
  close(): Promise<void>;
}
