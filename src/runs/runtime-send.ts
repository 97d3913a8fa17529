import { randomBytes } from 'node:crypto';
import { assertActorId } from '../calls/index.js';
import { OncelyError } from '../errors/index.js';
import { argsDigest, assertTenantId, isValidId } from '../ledger/index.js';
import type { RunSummary, RunTurn } from '../run-state/index.js';
import type { Store } from '../store/index.js';
import { userMessage, type UserContent } from './conversation.js';
import { runNotFound } from './runtime-queries.js';

/** The next user message of a run that has answered. */
export interface SendMessage {
  readonly tenantId: string;
  readonly runId: string;
  /** Text, or parts: `text`, `json` (structured content), `image`, `file` (a URL or base64 data). */
  readonly content: UserContent;
  /**
   * The sender's id for this message (1-128 of `A-Z a-z 0-9 _ . -`): sending it again, after a lost
   * answer, is the same turn, never a second one. Default a fresh `msg_…` (then a resend is a new turn).
   */
  readonly clientMessageId?: string;
  /** Who sent it (an API key's actor), kept on the turn. */
  readonly actorId?: string;
}

/** What `send` did: the turn the message is (`sent` false: it had been sent before) and the run now. */
export interface SentMessage {
  readonly sent: boolean;
  readonly turn: RunTurn;
  readonly run: RunSummary;
}

/** Appends the next user message of a run and queues its next turn, in one write (`Runtime.send`). */
export async function sendMessage(store: Store, request: SendMessage): Promise<SentMessage> {
  assertTenantId(request.tenantId);
  if (!isValidId(request.runId)) runNotFound(request.runId);
  const clientMessageId = request.clientMessageId ?? `msg_${randomBytes(8).toString('hex')}`;
  if (!isValidId(clientMessageId)) {
    throw new OncelyError(
      'RUN_INPUT_INVALID',
      `client message id ${JSON.stringify(clientMessageId)} is not valid; use 1-128 of A-Z a-z 0-9 _ . -`,
    );
  }
  if (request.actorId !== undefined) assertActorId(request.actorId, 'a message');
  const message = await userMessage(request.content);
  const result = await store.runs.sendMessage({
    tenantId: request.tenantId,
    runId: request.runId,
    clientMessageId,
    message,
    messageDigest: argsDigest(message),
    actorId: request.actorId ?? null,
    reason: 'a new message: the next turn',
  });
  if (result === undefined) runNotFound(request.runId);
  switch (result.kind) {
    case 'sent':
    case 'replayed':
      return { sent: result.kind === 'sent', turn: result.turn, run: result.run };
    case 'mismatch':
      throw new OncelyError(
        'RUN_MESSAGE_CONFLICT',
        `run ${request.runId} already took message ${clientMessageId} (turn ${result.turn.turn}) with other ` +
          'content; a new message needs a new client message id, and nothing was appended',
        { details: { runId: request.runId, clientMessageId, turn: result.turn.turn } },
      );
    case 'not_ready':
      throw new OncelyError(
        'RUN_NOT_AWAITING_MESSAGE',
        `run ${request.runId} is ${result.run.status}; it takes a new message once it has answered ` +
          `(completed)${result.run.status === 'failed' ? ' — retry it first' : ''}, and nothing was appended`,
        { details: { runId: request.runId, status: result.run.status } },
      );
  }
}
