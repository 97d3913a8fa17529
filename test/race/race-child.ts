/*
 * One racer of test/race/reserve-race.test.ts, run as its own OS process:
 *   node --import tsx test/race/race-child.ts '<config json>'
 * It opens every store the config names, prints `ready`, then for each `go <json>` line on stdin runs
 * executeToolCall once and prints `result <json>`; on `exit` (or end of stdin) it closes its ledgers
 * and exits 0. Any error exits non-zero with the reason on stderr.
 */
import { appendFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod';
import { executeToolCall, openLedger, type Ledger } from '../../src/calls/index.js';
import { defineTool, external } from '../../src/tools/index.js';

interface ChildConfig {
  /** Store name → database URL; every store is opened before `ready`. */
  readonly stores: Record<string, string>;
  readonly toolName: string;
  readonly executeMs: number;
}

interface Go {
  readonly store: string;
  readonly tenantId: string;
  readonly runId: string;
  readonly toolCallId: string;
  readonly args: unknown;
  /** The "downstream system": one appended line per execution. */
  readonly downstream: string;
}

const config = JSON.parse(process.argv[2] ?? '') as ChildConfig;
const send = (line: string): void => {
  process.stdout.write(`${line}\n`);
};

const ledgers = new Map<string, Ledger>();
for (const [name, url] of Object.entries(config.stores)) {
  ledgers.set(name, await openLedger(url, { migrate: false, actorId: `race-child-${process.pid}` }));
}

let downstream = '';
const tool = defineTool({
  name: config.toolName,
  description: 'credits an account; each execution appends one line to the downstream file',
  input: z.object({ amountCents: z.number().int() }),
  effect: external(),
  async execute(args, context) {
    // O_APPEND: lines from several processes never overwrite each other.
    appendFileSync(
      downstream,
      `${JSON.stringify({ pid: process.pid, key: context.idempotencyKey, attempt: context.attempt })}\n`,
    );
    // Stay in flight long enough that the other racers find the call started.
    await sleep(config.executeMs, undefined, { signal: context.signal });
    return { receipt: `rcpt-${process.pid}-${context.attempt}`, amountCents: args.amountCents };
  },
});

send('ready');
const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (line === 'exit') break;
  if (!line.startsWith('go ')) throw new Error(`unexpected line from the parent: ${line}`);
  const go = JSON.parse(line.slice('go '.length)) as Go;
  const ledger = ledgers.get(go.store);
  if (ledger === undefined) throw new Error(`no store named ${go.store}`);
  downstream = go.downstream;
  const outcome = await executeToolCall(ledger, tool, go.args, {
    tenantId: go.tenantId,
    runId: go.runId,
    toolCallId: go.toolCallId,
  });
  send(
    `result ${JSON.stringify({
      pid: process.pid,
      status: outcome.status,
      source: outcome.status === 'completed' ? outcome.source : null,
      value: outcome.status === 'completed' ? outcome.value : null,
      record: {
        status: outcome.record.status,
        attempt: outcome.record.attempt,
        version: outcome.record.version,
      },
    })}`,
  );
}
lines.close();
for (const ledger of ledgers.values()) await ledger.close();
process.stdin.destroy();
