/**
 * DBOS Transact peer cases. DBOS checkpoints every step's output in its system database (a check
 * for a recorded output, then an insert into `operation_outputs`), so "one more durable step" is
 * one more `DBOS.runStep` inside a workflow that is already running. The `step` and `parallel-16`
 * cases keep one workflow running for the whole round and feed it a step per op (see step-feed.ts);
 * `workflow-3` starts and awaits a whole workflow per op. `close()` checks the system database
 * holds one checkpoint per step the round ran, so a case that stopped checkpointing fails loudly.
 */
import { DBOS } from '@dbos-inc/dbos-sdk';
import { randomUUID } from 'node:crypto';
import type { BenchCase, OpenCase } from '../case.js';
import { acquireDbos, releaseDbos } from './dbos-session.js';
import { queryOne } from './scratch-db.js';
import { noopEffect, peerOps, StepFeed } from './step-feed.js';

const FAN_OUT = 16;
const WORKFLOW_STEPS = 3;

const COUNT_STEPS = `SELECT count(*)::int FROM dbos.operation_outputs WHERE workflow_uuid LIKE $1`;

/** Feeds of the running long workflows, by workflow id: a feed cannot be a (serialised) argument. */
const feeds = new Map<string, StepFeed>();

function noopStep(n: number): Promise<{ n: number }> {
  return DBOS.runStep(() => noopEffect(n), { name: 'noop' });
}

/** Runs `width` parallel steps per request until the feed stops; returns the steps it ran. */
async function longWorkflow(width: number): Promise<number> {
  const id = DBOS.workflowID ?? '';
  const feed = feeds.get(id);
  if (!feed) throw new Error(`no step feed for workflow ${id}`);
  let steps = 0;
  for (let k = 0; k <= feed.limit; k++) {
    const request = await feed.next();
    if (request === null) break;
    try {
      if (width === 1) await noopStep(request.n);
      else await Promise.all(Array.from({ length: width }, (_, j) => noopStep(request.n * width + j)));
    } catch (error) {
      request.fail(error);
      throw error;
    }
    steps += width;
    request.done();
  }
  return steps;
}

async function shortWorkflow(n: number): Promise<number> {
  for (let j = 0; j < WORKFLOW_STEPS; j++) await noopStep(n * WORKFLOW_STEPS + j);
  return WORKFLOW_STEPS;
}

// Registered at import: DBOS takes registrations only before launch.
const longRun = DBOS.registerWorkflow(longWorkflow, { name: 'peer-long-run' });
const shortRun = DBOS.registerWorkflow(shortWorkflow, { name: 'peer-workflow-3' });

async function expectSteps(systemUrl: string, idPattern: string, expected: number): Promise<void> {
  const found = await queryOne(systemUrl, COUNT_STEPS, [idPattern]);
  if (found !== expected) {
    throw new Error(`DBOS recorded ${String(found)} step outputs for ${idPattern}, expected ${expected}`);
  }
}

/** One workflow for the round; each op is one more request of `width` steps to it. */
async function openLongRun(url: string, ops: number, width: number): Promise<OpenCase> {
  const { systemUrl } = await acquireDbos(url);
  const workflowID = `peer-long-${randomUUID()}`;
  const feed = new StepFeed(ops + 1_000);
  feeds.set(workflowID, feed);
  const handle = await DBOS.startWorkflow(longRun, { workflowID })(width).catch(async (error: unknown) => {
    feeds.delete(workflowID);
    await releaseDbos();
    throw error;
  });
  const result = handle.getResult();
  // If the workflow dies, fail the ops waiting on it instead of hanging.
  result.catch((error: unknown) => feed.abort(error));
  let requests = 0;
  return {
    op: (i) => {
      requests += 1;
      return feed.push(i);
    },
    close: async () => {
      try {
        feed.stop();
        const steps = await result;
        if (steps !== requests * width) throw new Error(`DBOS ran ${steps} steps for ${requests} ops`);
        await expectSteps(systemUrl, workflowID, steps);
      } finally {
        feeds.delete(workflowID);
        await releaseDbos();
      }
    },
  };
}

async function openShortRuns(url: string): Promise<OpenCase> {
  const { systemUrl } = await acquireDbos(url);
  const prefix = `peer-wf3-${randomUUID()}`;
  let runs = 0;
  return {
    op: async (i) => {
      const handle = await DBOS.startWorkflow(shortRun, { workflowID: `${prefix}-${i}` })(i);
      await handle.getResult();
      runs += 1;
    },
    close: async () => {
      try {
        await expectSteps(systemUrl, `${prefix}-%`, runs * WORKFLOW_STEPS);
      } finally {
        await releaseDbos();
      }
    },
  };
}

/**
 * @example
 * for (const c of dbosCases()) { const open = await c.open(url); await open.op(0); await open.close(); }
 */
export function dbosCases(): BenchCase[] {
  const ops = peerOps();
  const fanOuts = peerOps(FAN_OUT);
  const runs = peerOps(WORKFLOW_STEPS);
  return [
    {
      id: 'peer.dbos.step',
      label: 'DBOS: one more step in a running workflow',
      unit: 'step',
      ops,
      concurrency: 1,
      open: (url) => openLongRun(url, ops, 1),
    },
    {
      id: `peer.dbos.parallel-${FAN_OUT}`,
      label: `DBOS: ${FAN_OUT} parallel steps in a running workflow`,
      unit: 'step',
      ops: fanOuts,
      concurrency: 1,
      open: (url) => openLongRun(url, fanOuts, FAN_OUT),
    },
    {
      id: `peer.dbos.workflow-${WORKFLOW_STEPS}`,
      label: `DBOS: workflow of ${WORKFLOW_STEPS} steps, started and awaited`,
      unit: 'run',
      ops: runs,
      concurrency: 1,
      open: openShortRuns,
    },
  ];
}
