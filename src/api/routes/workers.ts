import { principal } from '../auth/authenticate.js';
import { BEARER, type ApiApp, type ApiContext } from '../context.js';
import { authErrors } from '../schemas/common.js';
import { workersSchema } from '../schemas/workers.js';
import { DEFAULT_HEARTBEAT_MS, LIVE_HEARTBEATS } from '../../worker/index.js';
import type { WorkerView } from '../../store/index.js';

const tags = ['workers'];

/** The processes that drive runs: each with its last heartbeat and the runs of your tenant it holds. */
export function workerRoutes(app: ApiApp, ctx: ApiContext): void {
  app.get(
    '/v1/workers',
    {
      config: { role: 'viewer' },
      schema: {
        summary:
          'The workers heard from in the last hour (live ones within three heartbeats), oldest first, ' +
          'each with the runs of your tenant it holds',
        tags,
        security: BEARER,
        response: { 200: workersSchema, ...authErrors },
      },
    },
    async (request) => {
      const { tenantId } = principal(request);
      const workers = await ctx.store.workers.list(tenantId, {
        liveMs: LIVE_HEARTBEATS * DEFAULT_HEARTBEAT_MS,
      });
      return { items: workers.map(toWorker) };
    },
  );
}

function toWorker(w: WorkerView) {
  return {
    worker_id: w.workerId,
    kind: w.kind,
    host: w.host,
    pid: w.pid,
    concurrency: w.concurrency,
    version: w.version,
    stopping: w.stopping,
    live: w.live,
    started_at: w.startedAt,
    last_heartbeat_at: w.lastHeartbeatAt,
    runs: w.runs.map((r) => ({
      run_id: r.runId,
      agent: r.agent,
      lease_epoch: r.leaseEpoch,
      lease_expires_at: r.leaseExpiresAt,
    })),
  };
}
