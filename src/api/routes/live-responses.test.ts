import { describe, expect, it } from 'vitest';
import type { DeltaBatch } from '../../runs/stream-deltas.js';
import { LiveResponses } from './run-events.js';

const batch = (step: number, epoch: number, stream: number, deltas: DeltaBatch['deltas']): DeltaBatch => ({
  tenantId: 'acme',
  runId: 'run_1',
  step,
  epoch,
  stream,
  deltas,
});

const sent = (lines: Iterable<string>) =>
  [...lines].map((line) => JSON.parse(line.slice(line.indexOf('data: ') + 6)) as Record<string, unknown>);

describe('LiveResponses', () => {
  it('sends each delta once and in order, as model.delta events without an id', () => {
    const live = new LiveResponses();
    const first = [
      ...live.lines([
        batch(1, 1, 1, [
          { type: 'start', seq: 1 },
          { type: 'text', text: 'Hel', seq: 2 },
        ]),
      ]),
    ];
    expect(first.every((l) => l.startsWith('event: model.delta\ndata: ') && !l.includes('\nid: '))).toBe(
      true,
    );
    // The same deltas heard twice (in this process, and again by NOTIFY): sent once.
    const again = sent(
      live.lines([
        batch(1, 1, 1, [{ type: 'text', text: 'Hel', seq: 2 }]),
        batch(1, 1, 1, [{ type: 'text', text: 'lo', seq: 3 }]),
      ]),
    );
    expect(again).toEqual([{ step: 1, epoch: 1, stream: 1, type: 'text', text: 'lo', seq: 3 }]);
    expect(sent(first)[0]).toEqual({ step: 1, epoch: 1, stream: 1, type: 'start', seq: 1, restarted: false });
  });

  it('marks the start of a new stream for a step already begun as restarted', () => {
    const live = new LiveResponses();
    const first = sent(live.lines([batch(1, 1, 1, [{ type: 'start', seq: 1 }])]));
    expect(first).toHaveLength(1);
    const second = sent(live.lines([batch(1, 2, 1, [{ type: 'start', seq: 1 }])]));
    expect(second).toEqual([{ step: 1, epoch: 2, stream: 1, type: 'start', seq: 1, restarted: true }]);
    // A new step is not a restart.
    expect(sent(live.lines([batch(2, 2, 2, [{ type: 'start', seq: 1 }])]))[0]?.restarted).toBe(false);
  });

  it('drops the deltas of a step whose response was sent whole', () => {
    const live = new LiveResponses();
    live.answered({ step: 1, text: 'Hello' });
    expect(sent(live.lines([batch(1, 1, 1, [{ type: 'finish', finishReason: 'stop', seq: 4 }])]))).toEqual(
      [],
    );
    expect(sent(live.lines([batch(2, 1, 2, [{ type: 'start', seq: 1 }])]))).toHaveLength(1);
  });
});
