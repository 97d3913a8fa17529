import { Command } from 'commander';
import { isOncelyError } from '../errors/index.js';
import { assertLedgerExists, connectStore, type SchemaState, type Store } from '../store/index.js';
import { databaseUrl, shownUrl } from './config.js';

interface MigrateOptions {
  databaseUrl?: string;
  check?: boolean;
  create?: boolean;
}

export function migrateCommand(): Command {
  return new Command('migrate')
    .description('apply the schema to the database (safe to run from several processes at once)')
    .option(
      '--database-url <url>',
      'postgres://… or sqlite:PATH (default: $ONCELY_DATABASE_URL, else sqlite:.oncely/oncely.db)',
    )
    .option('--check', 'only report whether the schema is current; exit 1 if it is not')
    .option('--create', 'create the SQLite database if there is none (a first run; else STORE_NOT_FOUND)')
    .action(async (options: MigrateOptions) => {
      const url = databaseUrl(options.databaseUrl);
      // Only an explicit --create makes a SQLite ledger: a mistyped or deleted path is refused, not
      // started over. A check only looks: it never creates the file it was pointed at.
      const create = options.create === true && options.check !== true;
      let store: Store;
      try {
        store = await connectStore(url, { create });
      } catch (error) {
        if (!isOncelyError(error, 'STORE_NOT_FOUND') || options.check !== true) throw error;
        process.stdout.write(
          `${shownUrl(url)}: no database there (\`oncely migrate --create\` creates it)\n`,
        );
        process.exitCode = 1;
        return;
      }
      try {
        if (options.check !== true) {
          if (!create) assertLedgerExists(store, shownUrl(url), await store.schemaState());
          const report = await store.migrate();
          for (const name of report.applied) process.stdout.write(`applied ${name}\n`);
          if (report.applied.length === 0) process.stdout.write('nothing to apply\n');
        }
        const state = await store.schemaState();
        process.stdout.write(`${shownUrl(url)}: schema ${describeState(state)}\n`);
        if (state.state !== 'current') process.exitCode = 1;
      } finally {
        await store.close();
      }
    });
}

function describeState(state: SchemaState): string {
  switch (state.state) {
    case 'current':
      return `current (version ${state.version})`;
    case 'outdated':
      return `at version ${state.version}, needs ${state.latest}: run \`oncely migrate\``;
    case 'too-new':
      return `at version ${state.version}, newer than this oncely (${state.latest}): upgrade oncely`;
  }
}
