import type { Agent } from '../agents/index.js';
import type { LedgerLog } from '../calls/index.js';
import { OncelyError } from '../errors/index.js';
import type { Store } from '../store/index.js';
import type { Tool } from '../tools/index.js';
import type { Clock } from '../util/clock.js';
import type { ModelResponseInfo } from './model-step.js';
import type { RepeatInfo } from './settle-step.js';

export const DEFAULT_LEASE_MS = 30_000;

export interface RuntimeOptions {
  /** The agents this runtime can drive; a worker claims only runs of these. */
  readonly agents: readonly Agent[];
  /**
   * Tools known here besides the agents' own (every tool of a tools module): their compensation and
   * reconcile hooks serve operators even where no agent using them is driven (an API-only server).
   */
  readonly tools?: readonly Tool[];
  /** An open store; it stays open after `close()` unless `ownsStore`. */
  readonly store?: Store;
  /** Or a database URL to open (`sqlite:PATH` is migrated; PostgreSQL must be current). */
  readonly databaseUrl?: string;
  /** This process in leases and the ledger's history; default `host:pid`. */
  readonly owner?: string;
  /** How long a claim holds a run without renewal; default 30 s. */
  readonly leaseMs?: number;
  /**
   * The first wait before `sweep()` asks a reconcile hook that could not tell about a call again
   * (it doubles at each such answer, up to `reconcileMaxWaitMs`); also how long a call of a run that
   * just paused is left alone (its drive has just asked). 0 asks on every sweep. Default 30 s.
   */
  readonly reconcileEveryMs?: number;
  /** The longest wait between two asks of one call's hook by `sweep()`; default 10 minutes. */
  readonly reconcileMaxWaitMs?: number;
  /** Reconcile hooks `sweep()` asks at most per pass, longest unknown calls first; default 20. */
  readonly reconcilePerSweep?: number;
  /**
   * Drives of one run that may fail (throw, or die with their process) in a row before the run ends
   * `failed` with `RUN_RETRIES_EXCEEDED`; default 5. Counted at claim time.
   */
  readonly maxDriveAttempts?: number;
  /** The first delay before a released run is claimed again; it doubles each time; default 1000 ms. */
  readonly retryBaseMs?: number;
  /** Attempts of one key before a reconcile hook's `failed` no longer re-opens it; default 3. */
  readonly maxAttemptsPerCall?: number;
  /** Added to an attempt's timeout before it is taken to be unable to land; default 5000 ms. */
  readonly landingMarginMs?: number;
  /** How long a crashed process's slot of a tool with `concurrency` stays taken; default 30000 ms. */
  readonly toolSlotLeaseMs?: number;
  /** Where ledger conflicts are logged at error level; default standard error. */
  readonly log?: LedgerLog;
  /** Told of each model response of a run this runtime drives (its model and usage), for metrics. */
  readonly onModelResponse?: (response: ModelResponseInfo) => void;
  /**
   * Told of each repeat a step of a run this runtime drives writes down (the `tool.repeat` event):
   * its tenant, agent, tool and decision (`ask`, `refuse`, `wait`, `approved`, `rejected`), for
   * metrics. What it throws is ignored.
   */
  readonly onRepeat?: (info: RepeatInfo) => void;
  /**
   * The time of everything this runtime does: leases and their renewals, attempts' timeouts and
   * backoffs, tool slots, model call timeouts, the sweep's waits, a worker's polls and heartbeats.
   * Default the machine's (`realClock`); a simulation passes a virtual one. A store opened here from
   * `databaseUrl` gets it too; an open `store` keeps the clock it was opened with, so open it with the
   * same one (`openStore(url, { clock })`).
   */
  readonly clock?: Clock;
  /** The jitter of a read tool's backoff, a number in [0, 1); default `Math.random`. */
  readonly random?: () => number;
}

export const DEFAULT_MAX_DRIVE_ATTEMPTS = 5;

/** The runtime's agents by name; two agents may not share one. */
export function indexAgents(agents: readonly Agent[]): Map<string, Agent> {
  const byName = new Map<string, Agent>();
  for (const agent of agents) {
    if (byName.has(agent.name)) {
      throw new OncelyError('AGENT_DEFINITION_INVALID', `two agents are named "${agent.name}"`);
    }
    byName.set(agent.name, agent);
  }
  return byName;
}

/** Every tool of every agent, and the tools given besides, by name; one name must mean one tool. */
export function indexTools(tools: readonly Tool[]): Map<string, Tool> {
  const byName = new Map<string, Tool>();
  for (const tool of tools) {
    const known = byName.get(tool.name);
    if (known !== undefined && known !== tool) {
      throw new OncelyError(
        'AGENT_DEFINITION_INVALID',
        `two different tools are named "${tool.name}"; a tool name must mean one tool across agents and tools`,
      );
    }
    byName.set(tool.name, tool);
  }
  return byName;
}

/** The agent of this name, or `AGENT_NOT_FOUND` naming the agents there are. */
export function agentNamed(agents: ReadonlyMap<string, Agent>, name: string): Agent {
  const agent = agents.get(name);
  if (agent !== undefined) return agent;
  throw new OncelyError(
    'AGENT_NOT_FOUND',
    `there is no agent "${name}" here; the agents are: ${[...agents.keys()].join(', ') || '(none)'}`,
    { details: { agent: name } },
  );
}
