import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { GroupCommit } from './group-commit.js';

/** A write: its id and the rows it touches. */
interface W {
  readonly id: string;
  readonly rows: readonly string[];
}

/** A group commit whose statements the test answers by hand, recording what was sent. */
function harness(maxGroup = 8, maxInFlight = 1) {
  const sent: string[][] = [];
  const answers: { settle: (error?: Error) => void; ids: string[] }[] = [];
  const statement = (ids: string[]): Promise<string[]> => {
    sent.push(ids);
    return new Promise((resolve, reject) => {
      answers.push({
        ids,
        settle: (error) => (error === undefined ? resolve(ids.map((id) => `ok ${id}`)) : reject(error)),
      });
    });
  };
  const commit = new GroupCommit<W, string>({
    maxGroup,
    maxInFlight,
    check: (w) => {
      if (w.id === 'bad') throw new Error('refused before sending');
    },
    touches: (w) => w.rows,
    single: async (w) => (await statement([w.id]))[0]!,
    group: (ws) => statement(ws.map((w) => w.id)),
  });
  const tick = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));
  return { commit, sent, answers, tick };
}

describe('GroupCommit', () => {
  it('sends a write at once when nothing is in flight, and the writes that wait behind it as one group', async () => {
    const { commit, sent, answers, tick } = harness();
    const results = ['a', 'b', 'c', 'd', 'e'].map((id) => commit.submit({ id, rows: [`run:${id}`] }));
    expect(sent).toEqual([['a']]);
    answers[0]!.settle();
    await tick();
    // Four waited: a group of four (sizes are powers of two).
    expect(sent).toEqual([['a'], ['b', 'c', 'd', 'e']]);
    answers[1]!.settle();
    expect(await Promise.all(results)).toEqual(['ok a', 'ok b', 'ok c', 'ok d', 'ok e']);
    expect(commit.stats).toEqual({ statements: 2, writes: 5, refused: 0 });
  });

  it('never puts two writes of one run or key in a group, and keeps their order', async () => {
    const { commit, sent, answers, tick } = harness();
    const results = [
      commit.submit({ id: 'first', rows: ['run:x'] }),
      commit.submit({ id: 'x1', rows: ['run:x', 'key:k1'] }),
      commit.submit({ id: 'y1', rows: ['run:y', 'key:k1'] }),
      commit.submit({ id: 'x2', rows: ['run:x'] }),
      commit.submit({ id: 'z1', rows: ['run:z'] }),
    ];
    answers[0]!.settle();
    await tick();
    // y1 shares k1 with x1 and x2 shares run x: both wait for a later group, behind x1.
    expect(sent[1]).toEqual(['x1', 'z1']);
    answers[1]!.settle();
    await tick();
    expect(sent[2]).toEqual(['y1', 'x2']);
    answers[2]!.settle();
    await Promise.all(results);
  });

  it('sends each write again alone when the server refused the group, so an error is its own', async () => {
    const { commit, sent, answers, tick } = harness();
    const first = commit.submit({ id: 'a', rows: ['run:a'] });
    const b = commit.submit({ id: 'b', rows: ['run:b'] });
    const c = commit.submit({ id: 'c', rows: ['run:c'] });
    answers[0]!.settle();
    await tick();
    const refusal = new pg.DatabaseError('integer out of range', 0, 'error');
    answers[1]!.settle(refusal);
    await tick();
    expect(sent.slice(2)).toEqual([['b'], ['c']]);
    answers[2]!.settle(new Error('b alone fails'));
    answers[3]!.settle();
    await expect(b).rejects.toThrow('b alone fails');
    expect(await c).toBe('ok c');
    expect(await first).toBe('ok a');
    expect(commit.stats.refused).toBe(1);
  });

  it('fails every write of a group whose answer was lost, and sends none again (it may have committed)', async () => {
    const { commit, sent, answers, tick } = harness();
    const first = commit.submit({ id: 'a', rows: ['run:a'] });
    const rest = [commit.submit({ id: 'b', rows: ['run:b'] }), commit.submit({ id: 'c', rows: ['run:c'] })];
    answers[0]!.settle();
    await tick();
    answers[1]!.settle(new Error('Connection terminated unexpectedly'));
    for (const r of rest) await expect(r).rejects.toThrow('Connection terminated');
    await tick();
    expect(sent).toEqual([['a'], ['b', 'c']]);
    expect(await first).toBe('ok a');
  });

  it('refuses a bad write before queueing it, alone', async () => {
    const { commit, sent } = harness();
    await expect(commit.submit({ id: 'bad', rows: ['run:bad'] })).rejects.toThrow('refused before sending');
    expect(sent).toEqual([]);
  });

  it('keeps up to maxInFlight statements out at once', async () => {
    const { commit, sent, answers, tick } = harness(2, 2);
    const results = ['a', 'b', 'c', 'd', 'e', 'f'].map((id) => commit.submit({ id, rows: [id] }));
    expect(sent).toEqual([['a'], ['b']]);
    answers[1]!.settle();
    await tick();
    expect(sent[2]).toEqual(['c', 'd']);
    answers[0]!.settle();
    await tick();
    expect(sent[3]).toEqual(['e', 'f']);
    answers[2]!.settle();
    answers[3]!.settle();
    expect(await Promise.all(results)).toHaveLength(6);
  });
});
