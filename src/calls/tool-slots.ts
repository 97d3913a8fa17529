import { randomUUID } from 'node:crypto';
import { errorInfo } from '../errors/index.js';
import type { Tool } from '../tools/index.js';
import type { CallProgress } from './call-progress.js';
import type { ClockTimer } from '../util/clock.js';
import type { Ledger } from './ledger.js';
import { slotBell, type SlotBell } from './slot-bell.js';

/**
 * The first look again for a slot of a full tool when no release is heard, doubling up to the last.
 * A release wakes a waiter at once (in this process directly, from another through a wake-up); this
 * timer is only the fallback for a release nobody told us of (an expired lease, a lost wake-up).
 */
const FIRST_WAIT_MS = 20;
const MAX_WAIT_MS = 500;

type Progress = CallProgress | 'not-run' | undefined;

/** A slot of a limited tool held for one call: its lease renewed while held. */
class HeldSlot {
  readonly #timer: ClockTimer;
  #renewing: Promise<unknown> = Promise.resolve();

  constructor(
    private readonly ledger: Ledger,
    private readonly bell: SlotBell,
    private readonly tool: Tool,
    private readonly slot: number,
    private readonly holder: string,
  ) {
    const leaseMs = ledger.toolSlotLeaseMs;
    this.#timer = ledger.clock.setInterval(
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
   * Lets go of the slot once the call is over: free at once when its outcome is known (or it never
   * ran); held until its attempt can no longer land when it is not (its request may still reach the
   * downstream). Never throws: a release that fails is logged, and the slot comes back when its
   * lease expires (its renewals have stopped).
   */
  async release(progress: Progress): Promise<void> {
    this.ledger.clock.clearInterval(this.#timer);
    await this.#renewing;
    const known =
      progress === 'not-run' ||
      progress?.kind === 'settled' ||
      (progress?.kind === 'executed' && progress.attempt.kind !== 'indeterminate');
    const heldForMs = known ? 0 : this.tool.timeoutMs + this.ledger.landingMarginMs;
    try {
      await this.ledger.store.toolSlots.release(this.tool.name, this.slot, this.holder, heldForMs);
    } catch (error) {
      this.ledger.log.error(
        { tool: this.tool.name, slot: this.slot, holder: this.holder, err: errorInfo(error) },
        `could not release slot ${this.slot} of tool ${this.tool.name}; it comes back when its lease ` +
          `expires (runtime.tool_slot_lease_ms: ${this.ledger.toolSlotLeaseMs} ms)`,
      );
      return;
    }
    if (known) this.bell.ring(this.tool.name);
  }
}

/**
 * Runs calls with the cluster-wide limits of their tools (`concurrency`): in waves, each wave the
 * calls of tools without a limit and those that got a slot now; a call whose tool's slots are all
 * taken waits for a later wave, woken when a slot is freed (or, if no release is heard, after 20 ms
 * doubling to 0.5 s). Nothing of a waiting call is written: it is reserved only in its wave, so while
 * it waits nothing is sent and nothing is unknown. Each slot is held until its call's outcome is
 * known (see `HeldSlot.release`). `runWave` answers what became of each call of its wave: a call it
 * did not run (`not-run`) frees its slot at once, one whose outcome it does not know (undefined, or
 * every call when it throws) keeps it until it cannot land. Whatever throws (taking a slot, the wave,
 * an abort of `signal` while waiting), every slot taken is let go and its renewals stopped.
 */
export async function inToolSlots<C extends { readonly tool: Tool }>(
  ledger: Ledger,
  calls: readonly C[],
  signal: AbortSignal | undefined,
  runWave: (wave: readonly C[]) => Promise<ReadonlyMap<C, Progress>>,
): Promise<void> {
  const bell = slotBell(ledger.store.toolSlots);
  let waiting = [...calls];
  let waitMs = FIRST_WAIT_MS;
  while (waiting.length > 0) {
    const since = bell.rung;
    const slots = new Map<C, HeldSlot>();
    let ran = false;
    let progress: ReadonlyMap<C, Progress> = new Map();
    let later: C[] = [];
    try {
      later = await takeSlots(ledger, bell, waiting, slots);
      const wave = waiting.filter((call) => !later.includes(call));
      if (wave.length > 0) {
        ran = true;
        progress = await runWave(wave);
      }
    } finally {
      // A wave that never started ran nothing: its slots are free at once.
      await Promise.all([...slots].map(([call, held]) => held.release(ran ? progress.get(call) : 'not-run')));
    }
    if (ran) waitMs = FIRST_WAIT_MS;
    else {
      const tools = [...new Set(later.map((call) => call.tool.name))];
      await bell.wait(ledger.clock, tools, since, waitMs, signal);
      waitMs = Math.min(MAX_WAIT_MS, waitMs * 2);
    }
    waiting = later;
  }
}

/**
 * Takes a slot for each call of a limited tool that can have one now, into `slots`; answers the
 * calls that must wait. A tool found full is not asked again in this pass. If taking one throws, the
 * slots already in `slots` are the caller's to let go.
 */
async function takeSlots<C extends { readonly tool: Tool }>(
  ledger: Ledger,
  bell: SlotBell,
  calls: readonly C[],
  slots: Map<C, HeldSlot>,
): Promise<C[]> {
  const later: C[] = [];
  const full = new Set<string>();
  for (const call of calls) {
    const { name, concurrency } = call.tool;
    if (concurrency === undefined) continue;
    if (full.has(name)) {
      later.push(call);
      continue;
    }
    const holder = `${ledger.actor.id}:${randomUUID()}`;
    const slot = await ledger.store.toolSlots.acquire(name, concurrency, holder, ledger.toolSlotLeaseMs);
    if (slot === undefined) {
      full.add(name);
      later.push(call);
    } else slots.set(call, new HeldSlot(ledger, bell, call.tool, slot, holder));
  }
  return later;
}
