import { rmSync } from 'node:fs';
import { z } from 'zod';
import {
  defineAgent,
  defineTool,
  defineWorkflow,
  external,
  openRuntime,
  read,
  scriptedModel,
  startWorker,
  WorkflowEngine,
} from 'oncely';

// A refund review as a workflow: check the order, then refund it and email the customer side by
// side, then sum up. The payments service and the mailbox keep their own books.
const refunds = new Map<string, number>();
const emails: string[] = [];

const lookupOrder = defineTool({
  name: 'lookup_order',
  description: 'Look up an order',
  input: z.object({ orderId: z.string() }),
  effect: read(), // only looks: a node calling only this may be retried
  execute: ({ orderId }) => ({ orderId, amountCents: 4200, delivered: false }),
});
const issueRefund = defineTool({
  name: 'issue_refund',
  description: 'Refund an order',
  input: z.object({ orderId: z.string(), amountCents: z.number().int() }),
  effect: external(),
  execute: ({ amountCents }, ctx) => {
    if (!refunds.has(ctx.idempotencyKey)) refunds.set(ctx.idempotencyKey, amountCents);
    return { refundId: `rf_${refunds.size}` };
  },
  // Looks the refund up by its key: an unknown outcome is settled against the payments service.
  reconcile: (record) =>
    refunds.has(record.idempotencyKey)
      ? { status: 'completed', value: { refundId: 'found' } }
      : { status: 'failed', reason: 'no refund under this key' },
});
const sendEmail = defineTool({
  name: 'send_email',
  description: 'Email the customer',
  input: z.object({ text: z.string() }),
  effect: external(), // no way to look an email up: never retried by a fresh run
  execute: ({ text }) => {
    emails.push(text);
    return { sent: true };
  },
});

/** An agent that makes one call, then answers `reply`. */
const agent = (
  name: string,
  tool: Parameters<typeof defineAgent>[0]['tools'][number] | null,
  input: unknown,
  reply: string,
) =>
  defineAgent({
    name,
    instructions: `You are the ${name}.`,
    model: scriptedModel((_prompt, turn) =>
      tool !== null && turn === 0 ? { toolCalls: [{ toolName: tool.name, input }] } : { text: reply },
    ),
    tools: tool === null ? [] : [tool],
  });
const agents = [
  agent('checker', lookupOrder, { orderId: 'ord_7' }, 'ord_7: $42.00, not delivered: refund it.'),
  agent('refunder', issueRefund, { orderId: 'ord_7', amountCents: 4200 }, 'Refunded $42.00.'),
  agent('notifier', sendEmail, { text: 'Your refund is on its way.' }, 'Emailed the customer.'),
  agent('summarizer', null, null, 'Order ord_7 refunded and the customer told.'),
];

const review = (notifyPolicy: 'fail' | 'retry') =>
  defineWorkflow({
    name: 'refund-review',
    input: z.object({ orderId: z.string() }),
    nodes: {
      check: { agent: 'checker', recoveryPolicy: 'retry', maxAttempts: 3 },
      refund: { agent: 'refunder', needs: ['check'], recoveryPolicy: 'pause' },
      notify: { agent: 'notifier', needs: ['check'], recoveryPolicy: notifyPolicy },
      summary: { agent: 'summarizer', needs: ['refund', 'notify'] },
    },
    result: ({ nodes }) => (nodes.summary as { text: string }).text,
  });

rmSync('.oncely/workflow-example.db', { force: true });
const runtime = await openRuntime({ databaseUrl: 'sqlite:.oncely/workflow-example.db', agents });

// Retrying the email node would send a second email from a fresh run: refused when loaded.
let refused = '';
try {
  new WorkflowEngine(runtime, [review('retry')]);
} catch (error) {
  refused = (error as { code: string }).code;
}

const workflows = new WorkflowEngine(runtime, [review('fail')]);
const worker = startWorker(runtime, { workflows, pollMs: 20 });
await workflows.start({
  tenantId: 'acme',
  workflow: 'refund-review',
  input: { orderId: 'ord_7' },
  workflowRunId: 'review-ord_7',
});
let run = await workflows.get('acme', 'review-ord_7');
while (run.status === 'running') {
  await new Promise((resolve) => setTimeout(resolve, 20));
  run = await workflows.get('acme', 'review-ord_7');
}
await worker.stop();
console.log(
  run.status,
  '|',
  run.result,
  '|',
  run.nodes
    .map((n) => n.attempts.map((a) => a.runId))
    .flat()
    .join(' '),
);
console.log(`refunds ${refunds.size} | emails ${emails.length} | retry on send_email: ${refused}`);
// → completed | Order ord_7 refunded and the customer told. | review-ord_7.check.1 review-ord_7.refund.1 …
// → refunds 1 | emails 1 | retry on send_email: WORKFLOW_DEFINITION_INVALID
await runtime.close();
