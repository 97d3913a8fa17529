import type { StoreDialect } from './store.js';

/*
 * The run events a store writes itself (a run created, claimed, requeued, let go, retried or
 * cancelled), defined once for both dialects: each event's type and each field of its data, taken
 * from the run's row as it stands after the change, from a parameter of the statement, or a
 * constant. Each store renders the definition into its own SQL (`eventDataSql`), so the two cannot
 * write different events for the same change; test/store/drift.test.ts compares what they write.
 * (The events a driver writes with a save come to both stores as data, and are written as given.)
 */

/** Where a field of an event's data comes from. */
type Field =
  | { readonly column: string }
  /** A time column, written as an ISO time in UTC (`2026-12-04T10:00:00.000Z`) on both stores. */
  | { readonly time: string }
  /** A parameter of the statement, by name: each store says how it is bound. */
  | { readonly param: string }
  | { readonly value: string | boolean };

export interface RunEventDefinition {
  readonly type: string;
  readonly data: Readonly<Record<string, Field>>;
}

const column = (name: string): Field => ({ column: name });
const param = (name: string): Field => ({ param: name });
const value = (v: string | boolean): Field => ({ value: v });

export const STORE_RUN_EVENTS = {
  created: { type: 'run.created', data: { agent: column('agent'), status: value('queued') } },
  claimed: {
    type: 'run.claimed',
    data: {
      owner: column('lease_owner'),
      epoch: column('lease_epoch'),
      driveAttempt: column('drive_attempts'),
    },
  },
  requeued: { type: 'run.status', data: { status: value('queued'), reason: param('reason') } },
  released: {
    type: 'run.status',
    data: {
      status: value('queued'),
      reason: param('reason'),
      retryAt: { time: 'lease_expires_at' },
      cause: param('cause'),
    },
  },
  retried: {
    type: 'run.status',
    data: { status: value('queued'), reason: param('reason'), actor: param('actor'), retry: value(true) },
  },
  messaged: {
    type: 'run.message',
    data: {
      turn: column('turn'),
      clientMessageId: param('clientMessageId'),
      messageIndex: column('message_count - 1'),
      actor: param('actor'),
    },
  },
  messageQueued: { type: 'run.status', data: { status: value('queued'), reason: param('reason') } },
  cancelled: {
    type: 'run.status',
    data: { status: value('cancelled'), reason: param('reason'), actor: param('actor') },
  },
} as const satisfies Record<string, RunEventDefinition>;

const quoted = (s: string): string => `'${s.replace(/'/g, "''")}'`;

/**
 * The SQL expression of an event's data for one dialect, over the run's row (`row`, an alias or
 * table name) and the statement's parameters (`params`: each parameter's placeholder, cast as the
 * dialect needs).
 */
export function eventDataSql(
  dialect: StoreDialect,
  event: RunEventDefinition,
  row: string,
  params: Readonly<Record<string, string>> = {},
): string {
  const parts = Object.entries(event.data).map(([key, field]) => {
    let sql: string;
    if ('column' in field) sql = `${row}.${field.column}`;
    else if ('time' in field)
      sql =
        dialect === 'postgres'
          ? `to_char(${row}.${field.time} AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')`
          : `${row}.${field.time}`;
    else if ('param' in field) {
      const placeholder = params[field.param];
      if (placeholder === undefined)
        throw new Error(`event ${event.type} needs the parameter ${field.param}`);
      sql = placeholder;
    } else if (typeof field.value === 'boolean')
      sql = dialect === 'postgres' ? String(field.value) : `json('${String(field.value)}')`;
    else sql = quoted(field.value);
    return `${quoted(key)}, ${sql}`;
  });
  return `${dialect === 'postgres' ? 'jsonb_build_object' : 'json_object'}(${parts.join(', ')})`;
}
