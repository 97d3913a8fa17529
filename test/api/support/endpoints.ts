import type { ApiKeyRole } from '../../../src/store/index.js';
import { createApiKey } from '../../../src/api/index.js';
import { TENANT, type ApiHarness } from './harness.js';

/** Records of tenant acme that every endpoint can be pointed at. */
export interface Seeds {
  /** An indeterminate call (resolvable). */
  readonly unknownKey: string;
  /** An indeterminate call of a tool with a reconcile hook (its hook can be asked). */
  readonly reconcilableKey: string;
  /** A completed call of a tool with a compensation hook (compensable). */
  readonly completedKey: string;
  /** A run waiting for approval (cancellable), and its pending approval. */
  readonly runId: string;
  readonly approvalKey: string;
  /** A live viewer key of acme (revocable). */
  readonly keyId: string;
  /** A failed run (retryable). */
  readonly failedRunId: string;
  /** A completed run (it takes a next message). */
  readonly completedRunId: string;
  /** A running workflow run (cancellable). */
  readonly workflowRunId: string;
  /** A workflow run waiting for an operator on its node `a` (decidable). */
  readonly pausedWorkflowRunId: string;
}

export interface Endpoint {
  readonly method: 'GET' | 'POST';
  /** The route as the server registered it. */
  readonly route: string;
  readonly role: ApiKeyRole;
  /** `record`: about one of acme's records; `list`: acme's records; `create`: makes a new one. */
  /** `self`: an answer about the key itself (its own tenant); `feed`: a stream of its own tenant's. */
  readonly kind: 'record' | 'list' | 'create' | 'self' | 'feed';
  /** An event stream: read its headers only. */
  readonly stream?: boolean;
  path(seeds: Seeds): string;
  /** A body the route accepts. */
  body?(seeds: Seeds): Record<string, unknown>;
  /** What the route answers the right key with; default 200. */
  readonly ok?: number;
}

const enc = encodeURIComponent;

/** Every authenticated route of the API, with a valid request for each. */
export const ENDPOINTS: readonly Endpoint[] = [
  {
    method: 'GET',
    route: '/v1/tool-executions',
    role: 'viewer',
    kind: 'list',
    path: () => '/v1/tool-executions?status=all',
  },
  {
    method: 'GET',
    route: '/v1/tool-executions/:key',
    role: 'viewer',
    kind: 'record',
    path: (s) => `/v1/tool-executions/${enc(s.unknownKey)}`,
  },
  {
    method: 'POST',
    route: '/v1/tool-executions/:key/resolve',
    role: 'operator',
    kind: 'record',
    path: (s) => `/v1/tool-executions/${enc(s.unknownKey)}/resolve`,
    body: () => ({ status: 'failed', reason: 'checked the billing console' }),
  },
  {
    method: 'POST',
    route: '/v1/tool-executions/:key/reconcile',
    role: 'operator',
    kind: 'record',
    path: (s) => `/v1/tool-executions/${enc(s.reconcilableKey)}/reconcile`,
  },
  {
    method: 'POST',
    route: '/v1/tool-executions/resolve',
    role: 'operator',
    kind: 'self',
    path: () => '/v1/tool-executions/resolve',
    body: (s) => ({ keys: [s.unknownKey], status: 'failed', reason: 'checked the billing console' }),
  },
  { method: 'GET', route: '/v1/incidents', role: 'viewer', kind: 'self', path: () => '/v1/incidents?q=acct' },
  {
    method: 'GET',
    route: '/v1/loop-runs/:run_id',
    role: 'viewer',
    kind: 'record',
    path: (s) => `/v1/loop-runs/${s.unknownKey.split(':')[0] ?? ''}`,
  },
  {
    method: 'POST',
    route: '/v1/tool-executions/:key/compensate',
    role: 'operator',
    kind: 'record',
    path: (s) => `/v1/tool-executions/${enc(s.completedKey)}/compensate`,
    body: () => ({ reason: 'credited by mistake' }),
  },
  {
    method: 'POST',
    route: '/v1/runs',
    role: 'operator',
    kind: 'create',
    path: () => '/v1/runs',
    body: () => ({ agent: 'credit-agent', input: 'credit acct_1' }),
  },
  { method: 'GET', route: '/v1/runs', role: 'viewer', kind: 'list', path: () => '/v1/runs' },
  {
    method: 'GET',
    route: '/v1/runs/:run_id',
    role: 'viewer',
    kind: 'record',
    path: (s) => `/v1/runs/${s.runId}`,
  },
  {
    method: 'POST',
    route: '/v1/runs/:run_id/cancel',
    role: 'operator',
    kind: 'record',
    path: (s) => `/v1/runs/${s.runId}/cancel`,
    body: () => ({ reason: 'no longer needed' }),
  },
  {
    method: 'POST',
    route: '/v1/runs/:run_id/retry',
    role: 'operator',
    kind: 'record',
    path: (s) => `/v1/runs/${s.failedRunId}/retry`,
    body: () => ({ reason: 'the provider is back' }),
  },
  {
    method: 'GET',
    route: '/v1/runs/:run_id/events',
    role: 'viewer',
    kind: 'record',
    stream: true,
    path: (s) => `/v1/runs/${s.runId}/events`,
  },
  {
    method: 'POST',
    route: '/v1/runs/:run_id/messages',
    role: 'operator',
    kind: 'record',
    ok: 201,
    path: (s) => `/v1/runs/${s.completedRunId}/messages`,
    body: () => ({ client_message_id: 'msg-1', content: 'and the other order?' }),
  },
  {
    method: 'GET',
    route: '/v1/runs/:run_id/messages',
    role: 'viewer',
    kind: 'record',
    path: (s) => `/v1/runs/${s.completedRunId}/messages?format=ui`,
  },
  { method: 'GET', route: '/v1/usage', role: 'viewer', kind: 'self', path: () => '/v1/usage' },
  { method: 'GET', route: '/v1/approvals', role: 'viewer', kind: 'list', path: () => '/v1/approvals' },
  {
    method: 'POST',
    route: '/v1/approvals/:key/approve',
    role: 'operator',
    kind: 'record',
    path: (s) => `/v1/approvals/${enc(s.approvalKey)}/approve`,
    body: () => ({}),
  },
  {
    method: 'POST',
    route: '/v1/approvals/:key/reject',
    role: 'operator',
    kind: 'record',
    path: (s) => `/v1/approvals/${enc(s.approvalKey)}/reject`,
    body: () => ({ reason: 'not owed' }),
  },
  {
    method: 'POST',
    route: '/v1/workflow-runs',
    role: 'operator',
    kind: 'create',
    ok: 201,
    path: () => '/v1/workflow-runs',
    body: () => ({ workflow: 'review', input: 'check order ord_1' }),
  },
  {
    method: 'GET',
    route: '/v1/workflow-runs',
    role: 'viewer',
    kind: 'list',
    path: () => '/v1/workflow-runs',
  },
  {
    method: 'GET',
    route: '/v1/workflow-runs/:workflow_run_id',
    role: 'viewer',
    kind: 'record',
    path: (s) => `/v1/workflow-runs/${s.workflowRunId}`,
  },
  {
    method: 'GET',
    route: '/v1/workflow-runs/:workflow_run_id/events',
    role: 'viewer',
    kind: 'record',
    stream: true,
    path: (s) => `/v1/workflow-runs/${s.workflowRunId}/events`,
  },
  {
    method: 'POST',
    route: '/v1/workflow-runs/:workflow_run_id/cancel',
    role: 'operator',
    kind: 'record',
    path: (s) => `/v1/workflow-runs/${s.workflowRunId}/cancel`,
    body: () => ({ reason: 'the order was withdrawn' }),
  },
  {
    method: 'POST',
    route: '/v1/workflow-runs/:workflow_run_id/decide',
    role: 'operator',
    kind: 'record',
    path: (s) => `/v1/workflow-runs/${s.pausedWorkflowRunId}/decide`,
    body: () => ({ node: 'a', action: 'retry', reason: 'checked the ledger: nothing took effect' }),
  },
  { method: 'GET', route: '/v1/api-keys', role: 'admin', kind: 'list', path: () => '/v1/api-keys' },
  { method: 'GET', route: '/v1/workers', role: 'viewer', kind: 'list', path: () => '/v1/workers' },
  { method: 'GET', route: '/v1/me', role: 'viewer', kind: 'self', path: () => '/v1/me' },
  {
    method: 'GET',
    route: '/v1/inbox/events',
    role: 'viewer',
    kind: 'feed',
    stream: true,
    path: () => '/v1/inbox/events',
  },
  {
    method: 'POST',
    route: '/v1/api-keys',
    role: 'admin',
    kind: 'create',
    path: () => '/v1/api-keys',
    body: () => ({ actor_id: 'new-operator', role: 'operator' }),
  },
  {
    method: 'POST',
    route: '/v1/api-keys/:key_id/revoke',
    role: 'admin',
    kind: 'record',
    path: (s) => `/v1/api-keys/${s.keyId}/revoke`,
  },
];

/** Acme's records for the endpoints to point at. */
export async function seed(h: ApiHarness): Promise<Seeds> {
  const unknown = await h.seedCall('indeterminate');
  const reconcilable = await h.seedCall('indeterminate', { toolName: 'checked_credit' });
  const completed = await h.seedCall('completed');
  const runId = await h.drivenRun('approval-agent');
  const [approval] = await h.store.runs.approvalsOfRun(TENANT, runId);
  const spare = await createApiKey(h.store.apiKeys, { tenantId: TENANT, actorId: 'spare', role: 'viewer' });
  const failedRunId = await failedRun(h);
  const completedRunId = await h.drivenRun('credit-agent');
  const workflowRunId = (await h.workflows.start({ tenantId: TENANT, workflow: 'review', input: 'seeded' }))
    .workflowRun.workflowRunId;
  const pausedWorkflowRunId = await pausedWorkflowRun(h);
  return {
    unknownKey: unknown.idempotencyKey,
    reconcilableKey: reconcilable.idempotencyKey,
    completedKey: completed.idempotencyKey,
    runId,
    approvalKey: approval!.idempotencyKey,
    keyId: spare.record.keyId,
    failedRunId,
    completedRunId,
    workflowRunId,
    pausedWorkflowRunId,
  };
}

/** A workflow run whose node `a` failed (its policy is pause): it waits for an operator. */
async function pausedWorkflowRun(h: ApiHarness): Promise<string> {
  const { workflowRun } = await h.workflows.start({
    tenantId: TENANT,
    workflow: 'review',
    input: 'to pause',
  });
  const id = workflowRun.workflowRunId;
  await h.workflows.advanceDue(100); // starts node a's run
  await failRun(h, `${id}.a.1`);
  await h.workflows.runEnded(TENANT, `${id}.a.1`);
  await h.workflows.advanceDue(100);
  const now = await h.store.workflows.get(TENANT, id);
  if (now?.status !== 'awaiting_operator') throw new Error(`the seeded workflow run is ${now?.status}`);
  return id;
}

/** A run that ended failed (as a model that stayed down would leave it). */
async function failedRun(h: ApiHarness): Promise<string> {
  const { run } = await h.runtime.startRun({ tenantId: TENANT, agent: 'credit-agent', input: 'seeded' });
  return failRun(h, run.runId);
}

/** Claims a queued run and saves it failed. */
export async function failRun(h: ApiHarness, runId: string): Promise<string> {
  const run = { runId };
  const claimed = await h.store.runs.claim(TENANT, run.runId, 'seed', 60_000);
  if (claimed === undefined) throw new Error('could not claim the seeded run');
  const saved = await h.store.runs.saveCheckpoint({
    fence: {
      tenantId: TENANT,
      runId: run.runId,
      leaseEpoch: claimed.leaseEpoch,
      checkpointVersion: claimed.checkpointVersion,
    },
    checkpoint: claimed.checkpoint,
    storedMessages: claimed.checkpoint.messages.length,
    status: 'failed',
    error: { code: 'MODEL_CALL_FAILED', message: 'the provider stayed down' },
    reason: 'the provider stayed down',
  });
  if (saved === undefined) throw new Error('could not fail the seeded run');
  return run.runId;
}
