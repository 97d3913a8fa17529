import { Command, Option } from 'commander';
import { createApiKey } from '../api/index.js';
import { OncelyError } from '../errors/index.js';
import { API_KEY_ROLES, openStore, type ApiKeyRole, type Store } from '../store/index.js';
import { databaseUrl } from './config.js';
import { output, renderTable } from './table.js';

interface DbFlags {
  databaseUrl?: string;
  tenant: string;
  json?: boolean;
  /** `keys create --create`: a missing SQLite database is made (a first run); else STORE_NOT_FOUND. */
  create?: boolean;
}

const DATABASE_FLAG = [
  '--database-url <url>',
  'postgres://… or sqlite:PATH (default: $ONCELY_DATABASE_URL, else sqlite:.oncely/oncely.db)',
] as const;

/**
 * `oncely keys create|list|revoke`: API keys, straight on the database (so the first admin key can be
 * made before any key exists). Admins can also manage keys over the API.
 */
export function keysCommand(): Command {
  const command = new Command('keys').description('API keys, each bound to one tenant, actor and role');
  command.addCommand(createCommand());
  command.addCommand(listCommand());
  command.addCommand(revokeCommand());
  return command;
}

function createCommand(): Command {
  return new Command('create')
    .description('create a key; it is printed once and only its hash is stored')
    .requiredOption('--tenant <tenant>', 'the tenant every request with the key is scoped to')
    .requiredOption('--actor <id>', 'who acts with it: recorded as the operator in the ledger')
    .addOption(
      new Option('--role <role>', 'viewer, operator or admin').choices(API_KEY_ROLES).makeOptionMandatory(),
    )
    .option(...DATABASE_FLAG)
    .option('--create', 'create the SQLite database if there is none (a first run; else STORE_NOT_FOUND)')
    .option('--json', 'print the key and its record as JSON')
    .action(async (flags: DbFlags & { actor: string; role: ApiKeyRole }) => {
      await withStore(flags, async (store) => {
        const { key, record } = await createApiKey(store.apiKeys, {
          tenantId: flags.tenant,
          actorId: flags.actor,
          role: flags.role,
        });
        output(
          flags.json,
          {
            key,
            key_id: record.keyId,
            tenant_id: record.tenantId,
            actor_id: record.actorId,
            role: record.role,
            created_by: record.createdBy,
          },
          () =>
            `${key}\n\nkey ${record.keyId}: tenant ${record.tenantId}, actor ${record.actorId}, role ${record.role}\n` +
            'This is the only time the key is shown; store it now (e.g. as ONCELY_API_KEY).\n',
        );
      });
    });
}

function listCommand(): Command {
  return new Command('list')
    .description("a tenant's keys (never the keys themselves)")
    .requiredOption('--tenant <tenant>')
    .option(...DATABASE_FLAG)
    .option('--json', 'print JSON')
    .action(async (flags: DbFlags) => {
      await withStore(flags, async (store) => {
        const keys = await store.apiKeys.list(flags.tenant, { limit: 500 });
        output(flags.json, keys, () =>
          keys.length === 0
            ? `no keys in tenant ${flags.tenant}\n`
            : renderTable(
                ['KEY ID', 'ACTOR', 'ROLE', 'CREATED BY', 'CREATED', 'REVOKED'],
                keys.map((k) => [
                  k.keyId,
                  k.actorId,
                  k.role,
                  k.createdBy ?? '-',
                  k.createdAt,
                  k.revokedAt ?? '-',
                ]),
              ),
        );
      });
    });
}

function revokeCommand(): Command {
  return new Command('revoke')
    .description('revoke a key: requests with it answer 401 from now on')
    .argument('<key_id>', 'the key id (key_…), as `oncely keys list` shows it')
    .requiredOption('--tenant <tenant>')
    .option('--actor <id>', 'who revokes it (recorded)', 'cli')
    .option(...DATABASE_FLAG)
    .action(async (keyId: string, flags: DbFlags & { actor: string }) => {
      await withStore(flags, async (store) => {
        const revoked = await store.apiKeys.revoke(flags.tenant, keyId, flags.actor);
        if (revoked === undefined) {
          throw new OncelyError(
            'API_KEY_NOT_FOUND',
            `no live key ${keyId} in tenant ${flags.tenant}; \`oncely keys list --tenant ${flags.tenant}\` shows the keys`,
          );
        }
        output(flags.json, revoked, () => `revoked ${keyId}\n`);
      });
    });
}

/**
 * Opens the database the flags name. A missing SQLite file, or one with no oncely schema, is refused
 * (`STORE_NOT_FOUND`) unless `--create`: a key written into a fresh file would start a new, empty
 * ledger that `serve` could then be pointed at, forgetting every call that took effect.
 */
async function withStore(
  flags: { databaseUrl?: string; create?: boolean },
  fn: (store: Store) => Promise<void>,
): Promise<void> {
  const store = await openStore(databaseUrl(flags.databaseUrl), { create: flags.create === true });
  try {
    await fn(store);
  } finally {
    await store.close();
  }
}
