import { principal } from '../auth/authenticate.js';
import { BEARER, type ApiApp, type ApiContext } from '../context.js';
import { authErrors } from '../schemas/common.js';
import { workersSchema } from '../schemas/workers.js';
import { DEFAULT_HEARTBEAT_MS, LIVE_HEARTBEATS } from '../../worker/index.js';
import type { WorkerView } from '../../store/index.js';

const tags = ['workers'];

/**
 * The processes that drive runs: each with its last heartbeat and the runs of your tenant it holds.
 * Where they run (`worker_id`, by default host:pid, `host`, `pid`) is the deployment's, not a
 * tenant's: only an admin key sees it; for a viewer or operator those fields are null.
 */
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
      const { tenantId, role } = principal(request);
      const workers = await ctx.store.workers.list(tenantId, {
        liveMs: LIVE_HEARTBEATS * DEFAULT_HEARTBEAT_MS,
      });
      return { items: workers.map((w) => toWorker(w, role === 'admin')) };
    },
  );
}

function toWorker(w: WorkerView, admin: boolean) {
  return {
    worker_id: admin ? w.workerId : null,
    kind: w.kind,
    host: admin ? w.host : null,
    pid: admin ? w.pid : null,
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
