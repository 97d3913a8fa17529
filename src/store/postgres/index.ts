export {
  PostgresStore,
  DEFAULT_POSTGRES_TIMEOUTS,
  DEFAULT_GROUP_COMMIT,
  type GroupCommitSettings,
  type PostgresStoreOptions,
  type PostgresTimeouts,
} from './postgres-store.js';
