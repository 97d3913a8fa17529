/*
 * One naive bot process, for the levels that kill or freeze it: it takes refund jobs from a JSON file
 * (a queue with a claim timeout, as a plain job table has), "thinks", pays with `naivePay`, then writes
 * the refund down. `node naive-main.js '<options as JSON>'`; it says what it does on stdout.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { z } from 'zod/v4';
import { naivePay, readState, writeState } from './naive.js';
import { exitWithParent } from './orphan.js';

const optionsSchema = z.strictObject({
  stateFile: z.string().min(1),
  paymentsUrl: z.url(),
  name: z.string().min(1),
  claimMs: z.number().int().min(100).max(60_000),
  thinkMs: z.number().int().min(0).max(10_000),
});

async function main(): Promise<void> {
  const options = optionsSchema.parse(JSON.parse(process.argv[2] ?? '{}'));
  const say = (line: string): void => void process.stdout.write(`${options.name}: ${line}\n`);
  say('ready');
  exitWithParent();
  for (let round = 0; round < 6_000; round += 1) {
    const state = readState(options.stateFile);
    const job = state.jobs.find((j) => {
      const claim = state.claims[j.id];
      return (
        state.done[j.id] === undefined && (claim === undefined || Date.now() - claim.at > options.claimMs)
      );
    });
    if (job === undefined) {
      await sleep(25);
      continue;
    }
    state.claims[job.id] = { by: options.name, at: Date.now() };
    writeState(options.stateFile, state);
    say(`claimed ${job.id}`);
    await sleep(options.thinkMs);
    const payment = await naivePay(options.paymentsUrl, job);
    say(payment.paid ? `paid ${job.id} ${payment.paymentId}` : `failed ${job.id} ${payment.reason}`);
    if (!payment.paid) continue;
    const after = readState(options.stateFile);
    after.done[job.id] = { by: options.name, paymentId: payment.paymentId };
    writeState(options.stateFile, after);
    say(`recorded ${job.id}`);
  }
}

main().catch((error: unknown) => {
  process.stderr.write(
    `naive bot: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}\n`,
  );
  process.exit(1);
});
