import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A billing service on loopback for worker processes to charge through: one charge per idempotency
 * key (its own books, looked up by key), every request with the pid that sent it, and the peak of
 * requests in flight.
 */
export class Billing {
  readonly charges = new Map<string, { receipt: string; pid: number }>();
  readonly requests: { key: string; pid: number }[] = [];
  readonly inFlight = new Map<string, number>();
  peak = 0;
  server: Server | undefined;

  /** How long after a charge its answer comes. */
  constructor(private readonly answerMs = 300) {}

  async start(): Promise<string> {
    this.server = createServer((req, res) => {
      const lookup = /^\/charges\/(.+)$/.exec(req.url ?? '');
      if (req.method === 'GET' && lookup !== null) {
        const charge = this.charges.get(decodeURIComponent(lookup[1]!));
        res.writeHead(charge === undefined ? 404 : 200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(charge ?? { error: 'no such charge' }));
        return;
      }
      let body = '';
      req.on('data', (chunk: Buffer) => (body += chunk.toString('utf8')));
      req.on('end', () => {
        const key = String(req.headers['idempotency-key']);
        const { pid } = JSON.parse(body) as { pid: number };
        this.requests.push({ key, pid });
        this.inFlight.set(key, pid);
        this.peak = Math.max(this.peak, this.inFlight.size);
        // The charge takes effect now; the answer comes later (to a caller that may be gone).
        if (!this.charges.has(key)) this.charges.set(key, { receipt: `ch_${this.charges.size + 1}`, pid });
        setTimeout(() => {
          this.inFlight.delete(key);
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify(this.charges.get(key)));
        }, this.answerMs);
      });
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise((resolve) => this.server?.close(resolve));
  }
}
