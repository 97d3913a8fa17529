import type { ErrorInfo } from '../ledger/index.js';
import type { CheckpointStatus } from '../run-state/index.js';
import { definedAttributes, type Attributes } from '../tracing/index.js';

/**
 * How a drive ended: the run waits or is final; it was released to be claimed again later (a model
 * outage, a call whose last attempt may still land); or this process lost the run and stood down.
 */
export type DriveEnd =
  | {
      readonly kind: 'ended';
      readonly status: CheckpointStatus;
      /** Why, when the status says so (a failed run's error and reason, a wait's reason). */
      readonly error?: ErrorInfo | null;
      readonly reason?: string | null;
    }
  | { readonly kind: 'released'; readonly reason: string; readonly delayMs: number }
  | { readonly kind: 'stood_down'; readonly reason: string };

/** Why a stopping process let go of a run at a step boundary. */
export const HANDED_OFF =
  'the process driving the run is stopping (SIGTERM); it let go between steps, for another to claim at once';

export const DEFAULT_RETRY_BASE_MS = 1_000;
const MAX_RETRY_DELAY_MS = 60_000;

/** A delay as people read it: `1.5 s`. */
export function inSeconds(ms: number): string {
  return `${Math.round(ms / 100) / 10} s`;
}

/** The n-th retry's delay (n from 1): base, 2 base, 4 base, … up to a minute. */
export function retryDelay(baseMs: number, n: number): number {
  return Math.min(MAX_RETRY_DELAY_MS, baseMs * 2 ** Math.max(0, n - 1));
}

/** What a drive came to, as attributes of its span. */
export function driveEndAttributes(end: DriveEnd): Attributes {
  switch (end.kind) {
    case 'ended':
      return definedAttributes({
        'oncely.drive.end': 'ended',
        'oncely.run.status': end.status,
        'error.type': end.error?.code,
        'oncely.reason': end.reason,
      });
    case 'released':
      return { 'oncely.drive.end': 'released', 'oncely.reason': end.reason };
    case 'stood_down':
      return { 'oncely.drive.end': 'stood_down', 'oncely.reason': end.reason };
  }
}
