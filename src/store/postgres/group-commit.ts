import pg from 'pg';
import { OncelyError } from '../../errors/index.js';

/*
 * Group commit: the step writes of different runs that arrive while earlier ones are in flight are
 * sent together, as one statement (one round trip, one commit) of the parts each would have sent
 * alone. Nothing waits on a timer: a write goes at once while fewer than `maxInFlight` statements of
 * its kind are out, and otherwise waits for the first of them to come back (a few milliseconds), by
 * which time the writes that piled up behind it go as one. An idle worker's write therefore costs
 * what it did; a busy one's costs a share of a commit.
 *
 * A group holds at most one write of a run and one of each ledger key, so its parts touch disjoint
 * rows and each decides exactly what it would have decided alone (its own fence, its own
 * compare-and-set); a write that would repeat a run or key goes in a later group, in arrival order.
 * When the server refuses the group's statement (it rolled it back whole: nothing of it was written),
 * each write is sent again on its own, so one part's error is its own and no other's. When the
 * answer is lost (the connection dropped), whether the statement committed is unknown, and every
 * write of the group fails with that error as it would have alone: none is sent twice.
 */

export interface GroupCommitOptions<Req, Res> {
  /** The write alone: the statement it sends when it goes by itself, and after a refused group. */
  readonly single: (request: Req) => Promise<Res>;
  /** The writes of a group (two or more) as one statement; answers in their order. */
  readonly group: (requests: readonly Req[]) => Promise<Res[]>;
  /** Throws what the write alone would throw for a request it refuses before sending anything. */
  readonly check: (request: Req) => void;
  /** The rows a write touches (its run, its keys): no two writes of a group share one. */
  readonly touches: (request: Req) => readonly string[];
  readonly maxGroup: number;
  readonly maxInFlight: number;
}

interface Waiting<Req, Res> {
  readonly request: Req;
  readonly resolve: (value: Res) => void;
  readonly reject: (reason: unknown) => void;
}

/** Counts for the bench and tests: statements sent, writes they carried, groups refused. */
export interface GroupCommitStats {
  statements: number;
  writes: number;
  refused: number;
}

export class GroupCommit<Req, Res> {
  private readonly queue: Waiting<Req, Res>[] = [];
  private inFlight = 0;
  readonly stats: GroupCommitStats = { statements: 0, writes: 0, refused: 0 };

  constructor(private readonly options: GroupCommitOptions<Req, Res>) {
    if (options.maxGroup < 1 || options.maxInFlight < 1) {
      throw new Error('a group commit sends at least one write and one statement at a time');
    }
  }

  /** The write's answer, as `single` would give it. */
  submit(request: Req): Promise<Res> {
    return new Promise<Res>((resolve, reject) => {
      this.options.check(request);
      this.queue.push({ request, resolve, reject });
      this.pump();
    });
  }

  private pump(): void {
    while (this.inFlight < this.options.maxInFlight && this.queue.length > 0) {
      const group = this.take();
      this.inFlight += 1;
      this.stats.statements += 1;
      this.stats.writes += group.length;
      void this.send(group).finally(() => {
        this.inFlight -= 1;
        this.pump();
      });
    }
  }

  /** The oldest waiting writes that touch no row twice, up to `maxGroup`; the rest keep their places. */
  private take(): Waiting<Req, Res>[] {
    const group: Waiting<Req, Res>[] = [];
    const seen = new Set<string>();
    for (let i = 0; i < this.queue.length && group.length < this.options.maxGroup;) {
      const waiting = this.queue[i]!;
      const rows = this.options.touches(waiting.request);
      if (rows.some((row) => seen.has(row))) {
        // Rows of this one are in the group; later writes must not pass it on its rows either.
        for (const row of rows) seen.add(row);
        i += 1;
        continue;
      }
      for (const row of rows) seen.add(row);
      group.push(waiting);
      this.queue.splice(i, 1);
    }
    // Sizes are powers of two, so a process plans a handful of group statements, not one per size.
    let size = 1;
    while (size * 2 <= group.length) size *= 2;
    for (const back of group.splice(size).reverse()) this.queue.unshift(back);
    return group;
  }

  private async send(group: readonly Waiting<Req, Res>[]): Promise<void> {
    if (group.length === 1) {
      const [only] = group;
      await this.options.single(only!.request).then(only!.resolve, only!.reject);
      return;
    }
    let answers: Res[];
    try {
      answers = await this.options.group(group.map((w) => w.request));
    } catch (error) {
      if (!refusedByServer(error)) {
        for (const w of group) w.reject(error);
        return;
      }
      this.stats.refused += 1;
      await Promise.all(group.map((w) => this.options.single(w.request).then(w.resolve, w.reject)));
      return;
    }
    group.forEach((w, i) => w.resolve(answers[i]!));
  }
}

/**
 * Whether the server answered the statement with an error (so it rolled it back: nothing of it was
 * written), as opposed to an answer that never came (it may have committed).
 */
export function refusedByServer(error: unknown): boolean {
  const cause = error instanceof OncelyError ? error.cause : error;
  return cause instanceof pg.DatabaseError;
}
