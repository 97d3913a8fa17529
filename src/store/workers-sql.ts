/*
 * The worker registry's SQL, both dialects side by side. A heartbeat is one upsert (started_at kept
 * from the first); rows not heartbeaten for a day go with the next heartbeat of any worker. The list
 * joins each worker's runs of one tenant that it holds under a lease not yet expired.
 */

const COLUMNS =
  'w.worker_id, w.kind, w.host, w.pid, w.concurrency, w.version, w.started_at, w.heartbeat_at, w.stopping';

/** How long a worker's row outlives its last heartbeat before a heartbeat of any worker removes it. */
export const FORGET_AFTER_MS = 24 * 3600 * 1000;

export const HEARTBEAT = {
  postgres: `
WITH forgotten AS (
  DELETE FROM workers WHERE heartbeat_at < oncely_now() - make_interval(secs => ${FORGET_AFTER_MS / 1000})
)
INSERT INTO workers (worker_id, kind, host, pid, concurrency, version, stopping)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (worker_id) DO UPDATE SET heartbeat_at = oncely_now(), stopping = EXCLUDED.stopping,
  concurrency = EXCLUDED.concurrency, version = EXCLUDED.version`,
  sqlite: `
INSERT INTO workers (worker_id, kind, host, pid, concurrency, version, started_at, heartbeat_at, stopping)
VALUES (@workerId, @kind, @host, @pid, @concurrency, @version, @at, @at, @stopping)
ON CONFLICT (worker_id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, stopping = excluded.stopping,
  concurrency = excluded.concurrency, version = excluded.version`,
} as const;

export const FORGET = {
  sqlite: `DELETE FROM workers WHERE heartbeat_at < ?`,
} as const;

export const REMOVE = {
  postgres: `DELETE FROM workers WHERE worker_id = $1`,
  sqlite: `DELETE FROM workers WHERE worker_id = ?`,
} as const;

export const LIST = {
  postgres: `
SELECT ${COLUMNS}, w.heartbeat_at > oncely_now() - make_interval(secs => $2::double precision / 1000) AS live,
  COALESCE(json_agg(json_build_object('run_id', r.run_id, 'agent', r.agent,
    'lease_epoch', r.lease_epoch, 'lease_expires_at', r.lease_expires_at) ORDER BY r.run_id)
    FILTER (WHERE r.run_id IS NOT NULL), '[]'::json) AS runs
FROM workers w
LEFT JOIN runs r ON r.lease_owner = w.worker_id AND r.tenant_id = $1 AND r.status = 'running'
  AND r.lease_expires_at > oncely_now()
WHERE w.heartbeat_at > oncely_now() - make_interval(secs => $3::double precision / 1000)
GROUP BY w.worker_id
ORDER BY w.started_at, w.worker_id`,
  sqlite: `
SELECT ${COLUMNS}, w.heartbeat_at > @liveSince AS live,
  COALESCE(json_group_array(json_object('run_id', r.run_id, 'agent', r.agent,
    'lease_epoch', r.lease_epoch, 'lease_expires_at', r.lease_expires_at))
    FILTER (WHERE r.run_id IS NOT NULL), '[]') AS runs
FROM workers w
LEFT JOIN runs r ON r.lease_owner = w.worker_id AND r.tenant_id = @tenantId AND r.status = 'running'
  AND r.lease_expires_at > @now
WHERE w.heartbeat_at > @shownSince
GROUP BY w.worker_id
ORDER BY w.started_at, w.worker_id`,
} as const;
