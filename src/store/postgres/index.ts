export {
  PostgresStore,
  DEFAULT_POSTGRES_TIMEOUTS,
  type PostgresStoreOptions,
  type PostgresTimeouts,
} from './postgres-store.js';
