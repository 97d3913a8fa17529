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
    worker_id: z
      .string()
      .nullable()
      .describe('Its name in the leases it holds (host:pid by default); null unless your key is an admin’s'),
    kind: z.enum(['worker', 'serve']),
    host: z.string().nullable().describe('null unless your key is an admin’s'),
    pid: z.number().int().nullable().describe('null unless your key is an admin’s'),
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
