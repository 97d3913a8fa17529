import { randomBytes } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod/v4';
import { listenLoopback, readJson, sendJson, type LoopbackServer } from '../util/loopback-http.js';

/*
 * The drill's fake downstream services: each its own process (downstream-main.ts) on a loopback
 * port, keeping its own books — every effect it applied, with the key or reference it came under,
 * when, and the attempt and the process that sent it — so the drill can check the ledger against a
 * truth the runtime never wrote. Four kinds:
 * - `keyed` honours `Idempotency-Key`: a repeated key is the same effect;
 * - `unkeyed` takes no key: every request applies; an effect is found by the reference in its body;
 * - `late` honours the key, applies at once and answers only after `lateMs` (past the tool's
 *   timeout: the caller cannot know it took effect);
 * - `never` applies nothing: it answers 504 after `lateMs` (the caller cannot know it did not).
 */

export const DOWNSTREAM_KINDS = ['keyed', 'unkeyed', 'late', 'never'] as const;
export type DownstreamKind = (typeof DOWNSTREAM_KINDS)[number];

/** One effect in a downstream's books. */
export interface Effect {
  readonly id: string;
  readonly kind: DownstreamKind;
  /** The `Idempotency-Key` it was applied under (null on the unkeyed service). */
  readonly key: string | null;
  /** The reference the request carried (the call's key, on the unkeyed service). */
  readonly reference: string | null;
  /** The attempt of the call that sent it, and the lease epoch and process of the driver. */
  readonly attempt: number | null;
  readonly fencingToken: number | null;
  readonly sender: string | null;
  /** When it was applied (ISO). */
  readonly at: string;
  readonly amountCents: number;
}

/** What a downstream tells the drill at the end: its effects and every request it was sent. */
export interface Books {
  readonly kind: DownstreamKind;
  readonly effects: readonly Effect[];
  /** Requests to apply something (a deduplicated repeat of a key counts too). */
  readonly requests: number;
}

const applySchema = z.strictObject({
  amount_cents: z.number().int().positive().max(100_000_000),
  reference: z.string().min(1).max(512).optional(),
  attempt: z.number().int().min(1).optional(),
  fencing_token: z.number().int().min(0).optional(),
  sender: z.string().max(256).optional(),
});

export interface DownstreamOptions {
  readonly kind: DownstreamKind;
  /** How long `late` and `never` take to answer. */
  readonly lateMs?: number;
  /** How long an answer takes once the effect is applied (a network's and a service's own time). */
  readonly delayMs?: number;
  readonly port?: number;
}

export class Downstream {
  readonly kind: DownstreamKind;
  readonly effects: Effect[] = [];
  requests = 0;
  readonly #lateMs: number;
  readonly #delayMs: number;
  readonly #closing = new AbortController();
  #server: LoopbackServer | undefined;

  private constructor(options: DownstreamOptions) {
    this.kind = options.kind;
    this.#lateMs = options.lateMs ?? 2_000;
    this.#delayMs = options.delayMs ?? 0;
  }

  static async start(options: DownstreamOptions): Promise<Downstream> {
    const service = new Downstream(options);
    await service.#listen(options.port ?? 0);
    return service;
  }

  get url(): string {
    return this.#server?.url ?? '';
  }

  books(): Books {
    return { kind: this.kind, effects: [...this.effects], requests: this.requests };
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
    if (req.method === 'POST' && url.pathname === '/effects') return this.#apply(req, res);
    if (req.method === 'GET' && url.pathname === '/effects') {
      const key = url.searchParams.get('key');
      const reference = url.searchParams.get('reference');
      const found = this.effects.filter(
        (e) => (key !== null && e.key === key) || (reference !== null && e.reference === reference),
      );
      return sendJson(res, 200, { data: found });
    }
    if (req.method === 'GET' && url.pathname === '/books') return sendJson(res, 200, this.books());
    sendJson(res, 404, { error: `no route ${req.method ?? ''} ${url.pathname}` });
  }

  async #apply(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const parsed = applySchema.safeParse(await readJson(req));
    if (!parsed.success) return sendJson(res, 400, { error: parsed.error.message });
    this.requests += 1;
    if (this.kind === 'never') {
      await this.#wait(this.#lateMs);
      return sendJson(res, 504, { error: 'timed out; nothing was applied' });
    }
    const header = req.headers['idempotency-key'];
    const key = this.kind !== 'unkeyed' && typeof header === 'string' && header !== '' ? header : null;
    if (this.kind !== 'unkeyed' && key === null)
      return sendJson(res, 400, { error: 'Idempotency-Key required' });
    const existing = key === null ? undefined : this.effects.find((e) => e.key === key);
    const effect = existing ?? this.#record(key, parsed.data);
    // Applied; the answer takes the service's own time (a caller killed meanwhile never hears it).
    await this.#wait(this.kind === 'late' ? this.#lateMs : this.#delayMs);
    sendJson(res, existing === undefined ? 201 : 200, effect);
  }

  #record(key: string | null, body: z.infer<typeof applySchema>): Effect {
    const effect: Effect = {
      id: `fx_${randomBytes(6).toString('hex')}`,
      kind: this.kind,
      key,
      reference: body.reference ?? null,
      attempt: body.attempt ?? null,
      fencingToken: body.fencing_token ?? null,
      sender: body.sender ?? null,
      at: new Date().toISOString(),
      amountCents: body.amount_cents,
    };
    this.effects.push(effect);
    return effect;
  }

  async #wait(ms: number): Promise<void> {
    await sleep(ms, undefined, { signal: this.#closing.signal }).catch(() => undefined);
  }
}
