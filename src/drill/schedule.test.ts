import { describe, expect, it } from 'vitest';
import { CRASH_POINTS } from '../crash/index.js';
import { schedule, type Fault, type ScheduleOptions } from './schedule.js';

function take(options: ScheduleOptions, n: number): Fault[] {
  const faults: Fault[] = [];
  for (const fault of schedule(options)) {
    faults.push(fault);
    if (faults.length === n) break;
  }
  return faults;
}

const base: ScheduleOptions = { seed: 42, workers: 3, leaseMs: 2_000, api: true, redis: true };

describe('the drill schedule', () => {
  it('is the same for the same seed, and another for another seed', () => {
    expect(take(base, 200)).toEqual(take(base, 200));
    expect(take({ ...base, seed: 43 }, 200)).not.toEqual(take(base, 200));
  });

  it('opens with every crash point and every kind that applies, once each', () => {
    const opening = take(base, CRASH_POINTS.length + 5);
    expect(
      opening
        .filter((f) => f.kind === 'crash-point')
        .map((f) => f.point)
        .sort(),
    ).toEqual([...CRASH_POINTS].sort());
    expect(
      opening
        .filter((f) => f.kind !== 'crash-point')
        .map((f) => f.kind)
        .sort(),
    ).toEqual(['api-kill', 'boot-kill', 'freeze', 'kill', 'redis']);
  });

  it('applies only the kinds asked for, and never the once-only kinds again', () => {
    const faults = take({ ...base, kinds: ['freeze', 'boot-kill', 'redis'] }, 300);
    expect(new Set(faults.map((f) => f.kind))).toEqual(new Set(['freeze', 'boot-kill', 'redis']));
    expect(faults.filter((f) => f.kind === 'redis')).toHaveLength(1);
    // Both repeatable kinds come again and again.
    expect(faults.filter((f) => f.kind === 'freeze').length).toBeGreaterThan(100);
    expect(faults.filter((f) => f.kind === 'boot-kill').length).toBeGreaterThan(100);
  });

  it('refuses a set of kinds with none that kills', () => {
    expect(() => take({ ...base, kinds: ['freeze', 'redis'] }, 1)).toThrow(/one that kills/);
  });
});
