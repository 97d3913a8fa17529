/*
 * One Penny process: a worker driving Penny's runs on the game's SQLite file, until SIGTERM (or the
 * SIGKILL a level sends). `node penny-main.js '<options as JSON>'`; it says `ready` when claiming.
 */
import { z } from 'zod/v4';
import { openRuntime } from '../runs/index.js';
import { openStore } from '../store/index.js';
import { startWorker } from '../worker/index.js';
import { exitWithParent } from './orphan.js';
import { LANDING_MARGIN_MS, pennyAgent } from './penny.js';

const optionsSchema = z.strictObject({
  db: z.string().min(1),
  paymentsUrl: z.url(),
  owner: z.string().min(1),
  leaseMs: z.number().int().min(200).max(60_000),
  thinkMs: z.number().int().min(0).max(10_000),
  approval: z.boolean(),
});

async function main(): Promise<void> {
  const options = optionsSchema.parse(JSON.parse(process.argv[2] ?? '{}'));
  const store = await openStore(`sqlite:${options.db}`);
  const runtime = await openRuntime({
    store,
    agents: [pennyAgent(options)],
    owner: options.owner,
    leaseMs: options.leaseMs,
    landingMarginMs: LANDING_MARGIN_MS,
    reconcileEveryMs: 150,
  });
  // What the worker says, one line each on stdout: the game shows a frozen Penny standing down.
  const say =
    (level: string) =>
    (fields: Record<string, unknown>, message: string): void =>
      void process.stdout.write(`${options.owner} ${level}: ${message} ${JSON.stringify(fields)}\n`);
  const worker = startWorker(runtime, {
    log: { info: say('info'), warn: say('warn'), error: say('error') },
    pollMs: 25,
    sweepMs: 100,
    heartbeatMs: Math.max(100, Math.floor(options.leaseMs / 3)),
  });
  process.stdout.write(`ready ${options.owner} ${process.pid}\n`);
  exitWithParent();
  const stop = async (): Promise<void> => {
    await worker.stop();
    await runtime.close({ timeoutMs: 2_000 });
    await store.close();
  };
  process.once('SIGTERM', () => {
    stop().then(
      () => process.exit(0),
      (error: unknown) => {
        process.stderr.write(`penny ${options.owner}: ${String(error)}\n`);
        process.exit(1);
      },
    );
  });
}

main().catch((error: unknown) => {
  process.stderr.write(`penny: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`);
  process.exit(1);
});
