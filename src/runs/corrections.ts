import { outcomeOfRecord, type Ledger } from '../calls/index.js';
import type { JsonValue } from '../ledger/index.js';
import { heardOfRecorded } from './heard.js';
import { correctedIn, correctionMessage, toldNotTaken, type Correction } from './messages.js';

/*
 * A model told that a call did not take effect is corrected once the ledger knows better: an
 * operator settled the call `failed` (forced, while its attempt was still out), and the attempt's
 * effect then landed, a conflict. The correction is a message before the model's next call, saved
 * with the step like any message, so it is sent once and stays in the conversation.
 */

/**
 * The correction the model is owed before its next call, or undefined. Reads the ledger only when
 * the conversation told some call "did not take effect" and has not corrected it yet: one read for
 * them all, and each conflict's history for what landed.
 *
 * @example
 * const correction = await correctionOwed(ledger, 'acme', 'run_1', checkpoint.messages);
 * if (correction !== undefined) messages.push(correction);
 */
export async function correctionOwed(
  ledger: Ledger,
  tenantId: string,
  runId: string,
  messages: readonly JsonValue[],
): Promise<JsonValue | undefined> {
  const told = toldNotTaken(messages);
  if (told.size === 0) return undefined;
  for (const id of correctedIn(messages)) told.delete(id);
  if (told.size === 0) return undefined;
  const records = await ledger.store.ledger.getMany(
    [...told.keys()].map((id) => ({ tenantId, idempotencyKey: `${runId}:${id}` })),
  );
  const landed = records.filter((r) => r.status === 'failed' && r.conflictAt !== null);
  if (landed.length === 0) return undefined;
  const corrections: Correction[] = [];
  for (const record of landed.sort((a, b) => a.idempotencyKey.localeCompare(b.idempotencyKey))) {
    const heard = await heardOfRecorded(ledger.store.ledger, outcomeOfRecord(record));
    if (heard === undefined) continue;
    corrections.push({ toolCallId: record.toolCallId, toolName: record.toolName, heard });
  }
  return corrections.length === 0 ? undefined : correctionMessage(corrections);
}
