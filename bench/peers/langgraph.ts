/**
 * LangGraph JS peer cases, checkpointed by `PostgresSaver` in schema `langgraph` of the runner's
 * scratch database. LangGraph checkpoints once per super-step; both cases run with
 * `durability: 'sync'`, so a step's checkpoint (and its pending writes) is stored before the next
 * step starts or the invoke returns, as the other runtimes in the table do. (LangGraph's default,
 * `'async'`, overlaps the write with the next step.)
 *
 * `node` keeps one graph running for the round, a node that loops to itself, and feeds it one
 * super-step per op (see step-feed.ts). The node marks an op done when it is called for the next
 * super-step, i.e. once the previous one's checkpoint is stored. `graph-3` invokes
 * START → a → b → c → END on a fresh thread per op. `close()` counts the checkpoints stored.
 */
import { Annotation, END, START, StateGraph } from '@langchain/langgraph';
import { PostgresSaver } from '@langchain/langgraph-checkpoint-postgres';
import { randomUUID } from 'node:crypto';
import type { BenchCase, OpenCase } from '../case.js';
import { queryOne } from './scratch-db.js';
import { noopEffect, peerOps, StepFeed, type StepRequest } from './step-feed.js';

const SCHEMA = 'langgraph';
const GRAPH_NODES = 3;

const State = Annotation.Root({
  n: Annotation<number>(),
  done: Annotation<boolean>(),
});

const COUNT_CHECKPOINTS = `SELECT count(*)::int FROM ${SCHEMA}.checkpoints WHERE thread_id LIKE $1`;
const COUNT_THREADS = `SELECT count(DISTINCT thread_id)::int FROM ${SCHEMA}.checkpoints WHERE thread_id LIKE $1`;

async function openSaver(url: string): Promise<PostgresSaver> {
  const saver = PostgresSaver.fromConnString(url, { schema: SCHEMA });
  // The runner drops the scratch database WITH (FORCE) after close(): a connection of the saver's
  // pool still closing then gets "terminating connection", which unheard would crash the bench.
  (saver as unknown as { pool: { on(event: 'error', listener: () => void): void } }).pool.on(
    'error',
    () => undefined,
  );
  try {
    await saver.setup();
  } catch (error) {
    await saver.end();
    throw error;
  }
  return saver;
}

function chainGraph(saver: PostgresSaver, feed: StepFeed) {
  let previous: StepRequest | undefined;
  const step = async (): Promise<typeof State.Update> => {
    // Called for super-step k+1 only after step k's checkpoint is stored (durability 'sync').
    previous?.done();
    previous = undefined;
    const request = await feed.next();
    if (request === null) return { done: true };
    previous = request;
    return await noopEffect(request.n);
  };
  return new StateGraph(State)
    .addNode('step', step)
    .addEdge(START, 'step')
    .addConditionalEdges('step', (state) => (state.done ? END : 'step'))
    .compile({ checkpointer: saver });
}

async function openChain(url: string, ops: number): Promise<OpenCase> {
  const saver = await openSaver(url);
  const feed = new StepFeed(ops + 1_000);
  const threadId = `peer-chain-${randomUUID()}`;
  const graph = chainGraph(saver, feed);
  const run = graph.invoke(
    { n: -1, done: false },
    // Each super-step counts against the recursion limit: allow the feed's bound and the ends.
    { configurable: { thread_id: threadId }, durability: 'sync', recursionLimit: feed.limit + 10 },
  );
  run.catch((error: unknown) => feed.abort(error));
  let requests = 0;
  return {
    op: (i) => {
      requests += 1;
      return feed.push(i);
    },
    close: async () => {
      try {
        feed.stop();
        await run;
        // The input checkpoint, one per op's super-step, and the closing super-step.
        const found = await queryOne(url, COUNT_CHECKPOINTS, [threadId]);
        if (typeof found !== 'number' || found < requests + 1) {
          throw new Error(`LangGraph stored ${String(found)} checkpoints for ${requests} super-steps`);
        }
      } finally {
        await saver.end();
      }
    },
  };
}

function threeNodeGraph(saver: PostgresSaver) {
  const effect = (state: typeof State.State) => noopEffect(state.n);
  return new StateGraph(State)
    .addNode('a', effect)
    .addNode('b', effect)
    .addNode('c', effect)
    .addEdge(START, 'a')
    .addEdge('a', 'b')
    .addEdge('b', 'c')
    .addEdge('c', END)
    .compile({ checkpointer: saver });
}

async function openGraphRuns(url: string): Promise<OpenCase> {
  const saver = await openSaver(url);
  const graph = threeNodeGraph(saver);
  const prefix = `peer-g3-${randomUUID()}`;
  let runs = 0;
  return {
    op: async (i) => {
      await graph.invoke(
        { n: i, done: false },
        { configurable: { thread_id: `${prefix}-${i}` }, durability: 'sync' },
      );
      runs += 1;
    },
    close: async () => {
      try {
        const found = await queryOne(url, COUNT_THREADS, [`${prefix}-%`]);
        if (found !== runs)
          throw new Error(`LangGraph stored checkpoints for ${String(found)} of ${runs} runs`);
      } finally {
        await saver.end();
      }
    },
  };
}

/**
 * @example
 * for (const c of langgraphCases()) { const open = await c.open(url); await open.op(0); await open.close(); }
 */
export function langgraphCases(): BenchCase[] {
  const ops = peerOps();
  const runs = peerOps(GRAPH_NODES);
  return [
    {
      id: 'peer.langgraph.node',
      label: 'LangGraph: one more node (super-step) in a running graph',
      unit: 'step',
      ops,
      concurrency: 1,
      open: (url) => openChain(url, ops),
    },
    {
      id: 'peer.langgraph.graph-3',
      label: 'LangGraph: graph of 3 nodes, fresh thread, invoked and awaited',
      unit: 'run',
      ops: runs,
      concurrency: 1,
      open: openGraphRuns,
    },
  ];
}
