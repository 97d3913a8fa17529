/**
 * The processes that drive runs, as their heartbeats say: for operators (`oncely workers`,
 * GET /v1/workers). Never consulted for who drives a run; leases alone decide that.
 */
export interface WorkerBeat {
  /** The process's name in the leases it holds (`host:pid` by default). */
  readonly workerId: string;
  readonly kind: 'worker' | 'serve';
  readonly host: string;
  readonly pid: number;
  /** Runs it drives at once at most. */
  readonly concurrency: number;
  /** The oncely version it runs. */
  readonly version: string;
  /** True once it was told to stop (it claims nothing more and hands its runs over). */
  readonly stopping: boolean;
}

/** A run a worker holds under a lease that has not expired. */
export interface HeldRun {
  readonly runId: string;
  readonly agent: string;
  readonly leaseEpoch: number;
  readonly leaseExpiresAt: string;
}

export interface WorkerView extends WorkerBeat {
  readonly startedAt: string;
  readonly lastHeartbeatAt: string;
  /** Its last heartbeat is recent enough (within the `liveMs` the list was asked with). */
  readonly live: boolean;
  /** The runs of the tenant asked about that it holds now. */
  readonly runs: readonly HeldRun[];
}

export interface WorkerStore {
  /** Writes this process's heartbeat (its row, created the first time): one atomic upsert. */
  heartbeat(beat: WorkerBeat): Promise<void>;
  /** Removes this process's row (a clean stop). */
  remove(workerId: string): Promise<void>;
  /**
   * The workers heard from within `shownMs` (default an hour), oldest first, each `live` when heard
   * from within `liveMs`, with the runs of `tenantId` it holds under an unexpired lease.
   */
  list(tenantId: string, options: { liveMs: number; shownMs?: number }): Promise<WorkerView[]>;
}

export const DEFAULT_SHOWN_MS = 3600 * 1000;

type Time = string | Date;

export interface WorkerRow {
  worker_id: string;
  kind: 'worker' | 'serve';
  host: string;
  pid: number;
  concurrency: number;
  version: string;
  started_at: Time;
  heartbeat_at: Time;
  stopping: boolean | number;
  live: boolean | number;
  runs: string | { run_id: string; agent: string; lease_epoch: number; lease_expires_at: Time }[];
}

const iso = (t: Time): string => (typeof t === 'string' ? t : t.toISOString());

/** A row of either dialect (SQLite keeps booleans as 0/1 and JSON as text; PostgreSQL's JSON dates are text). */
export function toWorkerView(row: WorkerRow): WorkerView {
  const runs =
    typeof row.runs === 'string' ? (JSON.parse(row.runs) as Exclude<WorkerRow['runs'], string>) : row.runs;
  return {
    workerId: row.worker_id,
    kind: row.kind,
    host: row.host,
    pid: row.pid,
    concurrency: row.concurrency,
    version: row.version,
    stopping: row.stopping === true || row.stopping === 1,
    startedAt: iso(row.started_at),
    lastHeartbeatAt: iso(row.heartbeat_at),
    live: row.live === true || row.live === 1,
    runs: runs.map((r) => ({
      runId: r.run_id,
      agent: r.agent,
      leaseEpoch: r.lease_epoch,
      leaseExpiresAt: new Date(iso(r.lease_expires_at)).toISOString(),
    })),
  };
}
