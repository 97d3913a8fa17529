import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Tool } from '../tools/index.js';
import type { CallProgress } from './execute-tool-call.js';
import type { Ledger } from './ledger.js';

/** The first wait for a slot of a full tool, doubling up to the last. */
const FIRST_WAIT_MS = 20;
const MAX_WAIT_MS = 500;

/** A slot of a limited tool held for one call: its lease renewed while held. */
class HeldSlot {
  readonly #timer: NodeJS.Timeout;
  #renewing: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly ledger: Ledger,
    private readonly tool: Tool,
    private readonly slot: number,
    private readonly holder: string,
  ) {
    const leaseMs = ledger.toolSlotLeaseMs;
    this.#timer = setInterval(
      () => {
        // A renewal that fails (the store unreachable) is tried again at the next tick; past the lease
        // the slot may be taken by another call, as it would be if this process had died.
        this.#renewing = ledger.store.toolSlots.renew(tool.name, slot, holder, leaseMs).catch(() => false);
      },
      Math.max(10, Math.floor(leaseMs / 3)),
    );
    this.#timer.unref();
  }

  /**
   * Lets go of the slot once the call is over: free at once when its outcome is known; held until its
   * attempt can no longer land when it is not (its request may still reach the downstream).
   */
  async release(progress: CallProgress | 'not-run' | undefined): Promise<void> {
    clearInterval(this.#timer);
    await this.#renewing;
    const known =
      progress === 'not-run' ||
      progress?.kind === 'settled' ||
      (progress?.kind === 'executed' && progress.attempt.kind !== 'indeterminate');
    const heldForMs = known ? 0 : this.tool.timeoutMs + this.ledger.landingMarginMs;
    await this.ledger.store.toolSlots
      .release(this.tool.name, this.slot, this.holder, heldForMs)
      .catch(() => undefined); // unreleased, the slot comes back when its lease expires
  }
}

/**
 * Runs calls with the cluster-wide limits of their tools (`concurrency`): in waves, each wave the
 * calls of tools without a limit and those that got a slot now; a call whose tool's slots are all
 * taken waits (20 ms doubling to 0.5 s) for a later wave. Nothing of a waiting call is written: it
 * is reserved only in its wave, so while it waits nothing is sent and nothing is unknown. Each slot
 * is held until its call's outcome is known (see `HeldSlot.release`). `runWave` answers what became
 * of each call of its wave: a call it did not run (`not-run`) frees its slot at once, one whose
 * outcome it does not know (undefined, or every call when it throws) keeps it until it cannot land.
 */
export async function inToolSlots<C extends { readonly tool: Tool }>(
  ledger: Ledger,
  calls: readonly C[],
  signal: AbortSignal | undefined,
  runWave: (wave: readonly C[]) => Promise<ReadonlyMap<C, CallProgress | 'not-run' | undefined>>,
): Promise<void> {
  let waiting = [...calls];
  let waitMs = FIRST_WAIT_MS;
  while (waiting.length > 0) {
    const wave: C[] = [];
    const slots = new Map<C, HeldSlot>();
    const later: C[] = [];
    for (const call of waiting) {
      const limit = call.tool.concurrency;
      if (limit === undefined) {
        wave.push(call);
        continue;
      }
      const holder = `${ledger.actor.id}:${randomUUID()}`;
      const slot = await ledger.store.toolSlots.acquire(
        call.tool.name,
        limit,
        holder,
        ledger.toolSlotLeaseMs,
      );
      if (slot === undefined) later.push(call);
      else {
        wave.push(call);
        slots.set(call, new HeldSlot(ledger, call.tool, slot, holder));
      }
    }
    if (wave.length > 0) {
      let progress: ReadonlyMap<C, CallProgress | 'not-run' | undefined> = new Map();
      try {
        progress = await runWave(wave);
      } finally {
        await Promise.all([...slots].map(([call, held]) => held.release(progress.get(call))));
      }
      waitMs = FIRST_WAIT_MS;
    } else {
      signal?.throwIfAborted();
      await sleep(waitMs, undefined, signal === undefined ? {} : { signal });
      waitMs = Math.min(MAX_WAIT_MS, waitMs * 2);
    }
    waiting = later;
  }
}
