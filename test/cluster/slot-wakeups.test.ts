import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { RedisWakeups, publishingWakeups } from '../../src/store/redis-wakeups.js';
import { openStore, type Store, type WakeKind, type WakeListener } from '../../src/store/index.js';
import { waitFor } from '../support/processes.js';
import { redisUrlOrSkip } from '../support/redis.js';
import { openTestStore } from '../support/stores.js';

/*
 * A tool slot freed in one process is told to the others (`slot` on the wake-up channel: PostgreSQL's
 * NOTIFY, or Redis pub/sub where configured), so a call waiting for it there takes it at once; a
 * release that keeps the slot held (a request that may still land) tells nobody. Two stores on one
 * database stand for two processes.
 */

const redisUrl = await redisUrlOrSkip();
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (let job = cleanups.pop(); job !== undefined; job = cleanups.pop()) await job();
});

async function heard(listenOn: Store): Promise<{ kinds: WakeKind[]; listener: WakeListener }> {
  const kinds: WakeKind[] = [];
  let listening = false;
  const listener = listenOn.wakeups!.listen({
    // Only slot wake-ups: another test's run queued on a shared Redis says nothing here.
    onWake: (kind) => kind === 'slot' && kinds.push(kind),
    onState: (state) => (listening = state === 'listening'),
  });
  cleanups.push(() => listener.close());
  await waitFor('the listener to listen', () => Promise.resolve(listening || undefined), 10_000);
  return { kinds, listener };
}

/** Frees one slot and holds the other past the release, then lets a later notice arrive. */
async function releaseBoth(writer: Store): Promise<void> {
  expect(await writer.toolSlots.acquire('charge', 2, 'h1', 60_000)).toBe(0);
  expect(await writer.toolSlots.acquire('charge', 2, 'h2', 60_000)).toBe(1);
  await writer.toolSlots.release('charge', 1, 'h2', 60_000); // held: its request may still land
  await writer.toolSlots.release('charge', 0, 'h1', 0); // free now
}

describe('tool slot wake-ups', () => {
  it('on postgres: a slot freed by another store is heard as `slot`; one kept held is not', async () => {
    const a = await openTestStore('postgres', 'slot_wakeups');
    cleanups.push(() => a.cleanup());
    const b = await openStore(a.url);
    cleanups.push(() => b.close());
    const { kinds } = await heard(a.store);

    await releaseBoth(b);
    await waitFor('the wake-up', () => Promise.resolve(kinds.length > 0 || undefined), 10_000);
    await sleep(200); // a second notice, had the held release sent one, would be here by now
    expect(kinds).toEqual(['slot']);
    expect((await a.store.toolSlots.held('charge')).map((h) => h.holder)).toEqual(['h2']);
  });

  it.skipIf(redisUrl === undefined)(
    'over Redis on sqlite: a slot freed is published as `slot`; one kept held is not',
    async () => {
      const opened = await openTestStore('sqlite', 'slot_wakeups');
      cleanups.push(() => opened.cleanup());
      const redis = await RedisWakeups.open(redisUrl!);
      cleanups.push(() => redis.close());
      const store = publishingWakeups(opened.store, redis);
      const { kinds } = await heard(store);
      await sleep(100); // its SUBSCRIBE goes out as it is ready

      await releaseBoth(store);
      await waitFor('the wake-up', () => Promise.resolve(kinds.length > 0 || undefined), 10_000);
      await sleep(200);
      expect(kinds).toEqual(['slot']);
    },
  );
});
