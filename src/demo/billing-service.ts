import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod/v4';
import { listenLoopback, readJson, sendJson, type LoopbackServer } from '../util/loopback-http.js';

/** One credit (or charge) the billing service applied. */
export interface Credit {
  readonly id: string;
  readonly kind: 'credit' | 'charge';
  readonly account: string;
  readonly amountCents: number;
  /** The `Idempotency-Key` it was applied under (credits only). */
  readonly idempotencyKey: string | null;
  /** The caller's reference, for lookup (charges ignore keys, so this is how they are found). */
  readonly reference: string | null;
  voided: boolean;
}

/**
 * What the service does with the next request to apply a credit or charge: `timeout-after-apply`
 * applies it and then answers only after `hangMs` (the caller has given up: it took effect, the
 * caller does not know); `timeout-before-apply` waits `hangMs` and answers 504 without applying;
 * `timeout-then-apply` waits `hangMs`, then applies it and answers (the caller gave up before it
 * applied: a request still on its way); `error-after-apply` applies it and answers 500.
 */
export type Fault =
  'timeout-after-apply' | 'timeout-before-apply' | 'timeout-then-apply' | 'error-after-apply';

const applySchema = z.strictObject({
  account: z.string().min(1).max(128),
  amount_cents: z.number().int().positive().max(100_000_000),
  reference: z.string().min(1).max(256).optional(),
});

/**
 * A fake billing service on a real loopback HTTP port, for the demo and for crash tests:
 * - `POST /v1/credits` honours an `Idempotency-Key` header: a repeated key is the same credit;
 * - `POST /v1/charges` ignores keys (every request applies), but can be looked up by `reference`;
 * - `GET /v1/credits?idempotency_key=K`, `GET /v1/charges?reference=R` look them up;
 * - `POST /v1/credits/{id}/void` voids one (idempotent);
 * - it can be told to time out after or before applying the next one (`failNext`).
 * It keeps its own count of what took effect: the truth a test compares the ledger with.
 */
export class BillingService {
  readonly credits: Credit[] = [];
  /** Requests that asked to apply something, by key or reference (a deduplicated retry counts too). */
  readonly requests = new Map<string, number>();
  /** Void requests per credit id (voiding is idempotent; this counts how often it was asked). */
  readonly voidRequests = new Map<string, number>();
  /** While true, every request to apply something is answered 503 and nothing is applied. */
  down = false;
  /**
   * Called when a request applied something, before it is answered (awaited): a test or game can
   * kill the caller between the effect and its answer.
   */
  onApplied: ((credit: Credit) => Promise<void> | void) | undefined;
  readonly #faults: { fault: Fault; hangMs: number }[] = [];
  readonly #closing = new AbortController();
  #server: LoopbackServer | undefined;

  /** Starts listening on 127.0.0.1 (an ephemeral port unless one is given). */
  static async start(options: { port?: number } = {}): Promise<BillingService> {
    const service = new BillingService();
    await service.#listen(options.port ?? 0);
    return service;
  }

  get url(): string {
    return this.#server?.url ?? '';
  }

  /** The next request to apply something meets this fault. */
  failNext(fault: Fault, hangMs = 3_000): void {
    this.#faults.push({ fault, hangMs });
  }

  /** Credits and charges that stand (not voided) under this idempotency key or reference. */
  effectsFor(keyOrReference: string): number {
    return this.credits.filter(
      (c) => !c.voided && (c.idempotencyKey === keyOrReference || c.reference === keyOrReference),
    ).length;
  }

  /** Everything ever applied under this key or reference, voided or not. */
  appliedFor(keyOrReference: string): Credit[] {
    return this.credits.filter((c) => c.idempotencyKey === keyOrReference || c.reference === keyOrReference);
  }

  async close(): Promise<void> {
    this.#closing.abort();
    await this.#server?.close();
  }

  async #listen(port: number): Promise<void> {
    this.#server = await listenLoopback(port, (req, res) => this.#handle(req, res));
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const path = url.pathname;
    if (req.method === 'POST' && (path === '/v1/credits' || path === '/v1/charges')) {
      const kind = path === '/v1/credits' ? 'credit' : 'charge';
      return this.#apply(kind, req, res);
    }
    if (req.method === 'GET' && (path === '/v1/credits' || path === '/v1/charges')) {
      const key = url.searchParams.get('idempotency_key');
      const reference = url.searchParams.get('reference');
      const found = this.credits.filter(
        (c) =>
          (path === '/v1/credits' ? c.kind === 'credit' : c.kind === 'charge') &&
          ((key !== null && c.idempotencyKey === key) || (reference !== null && c.reference === reference)),
      );
      return sendJson(res, 200, { data: found.map(wire) });
    }
    const voiding = /^\/v1\/credits\/([A-Za-z0-9_]+)\/void$/.exec(path);
    if (req.method === 'POST' && voiding !== null) {
      const id = voiding[1] ?? '';
      this.voidRequests.set(id, (this.voidRequests.get(id) ?? 0) + 1);
      const credit = this.credits.find((c) => c.id === id);
      if (credit === undefined) return sendJson(res, 404, { error: 'no such credit' });
      credit.voided = true;
      return sendJson(res, 200, wire(credit));
    }
    sendJson(res, 404, { error: `no route ${req.method ?? ''} ${path}` });
  }

  async #apply(kind: 'credit' | 'charge', req: IncomingMessage, res: ServerResponse): Promise<void> {
    const parsed = applySchema.safeParse(await readJson(req));
    if (!parsed.success) return sendJson(res, 400, { error: parsed.error.message });
    const header = req.headers['idempotency-key'];
    const key = kind === 'credit' && typeof header === 'string' && header !== '' ? header : null;
    const reference = parsed.data.reference ?? null;
    const counted = key ?? reference;
    if (counted !== null) this.requests.set(counted, (this.requests.get(counted) ?? 0) + 1);
    if (this.down) return sendJson(res, 503, { error: 'the service is down; nothing was applied' });
    const fault = this.#faults.shift();
    if (fault?.fault === 'timeout-before-apply') {
      await this.#hang(fault.hangMs);
      return sendJson(res, 504, { error: 'timed out before applying' });
    }
    if (fault?.fault === 'timeout-then-apply') await this.#hang(fault.hangMs);
    const existing = key === null ? undefined : this.credits.find((c) => c.idempotencyKey === key);
    const credit = existing ?? this.#record(kind, parsed.data, key, reference);
    if (existing === undefined) await this.onApplied?.(credit);
    if (fault?.fault === 'timeout-after-apply') await this.#hang(fault.hangMs);
    if (fault?.fault === 'error-after-apply') return sendJson(res, 500, { error: 'internal error' });
    sendJson(res, existing === undefined ? 201 : 200, wire(credit));
  }

  #record(
    kind: 'credit' | 'charge',
    body: z.infer<typeof applySchema>,
    key: string | null,
    reference: string | null,
  ): Credit {
    const credit: Credit = {
      id: `${kind === 'credit' ? 'cr' : 'ch'}_${randomBytes(6).toString('hex')}`,
      kind,
      account: body.account,
      amountCents: body.amount_cents,
      idempotencyKey: key,
      reference,
      voided: false,
    };
    this.credits.push(credit);
    return credit;
  }

  async #hang(ms: number): Promise<void> {
    await sleep(ms, undefined, { signal: this.#closing.signal }).catch(() => undefined);
  }
}

function wire(credit: Credit): Record<string, unknown> {
  return {
    id: credit.id,
    kind: credit.kind,
    account: credit.account,
    amount_cents: credit.amountCents,
    idempotency_key: credit.idempotencyKey,
    reference: credit.reference,
    voided: credit.voided,
  };
}
