import { z } from 'zod/v4';

export const heldRunSchema = z
  .object({
    run_id: z.string(),
    agent: z.string(),
    lease_epoch: z.number().int(),
    lease_expires_at: z.string(),
  })
  .describe('A run of your tenant the worker holds under a lease that has not expired');

export const workerSchema = z
  .object({
    worker_id: z.string().describe('Its name in the leases it holds (host:pid by default)'),
    kind: z.enum(['worker', 'serve']),
    host: z.string(),
    pid: z.number().int(),
    concurrency: z.number().int().describe('Runs it drives at once at most'),
    version: z.string().describe('The oncely version it runs'),
    stopping: z.boolean().describe('Told to stop: it claims nothing and hands its runs over between steps'),
    live: z.boolean().describe('Heard from within three heartbeat periods'),
    started_at: z.string(),
    last_heartbeat_at: z.string(),
    runs: z.array(heldRunSchema),
  })
  .describe('A process that drives runs, as its heartbeats say');

export const workersSchema = z.object({ items: z.array(workerSchema) });
