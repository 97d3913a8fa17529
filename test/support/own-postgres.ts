// A PostgreSQL server of the tests' own: the drill's (src/drill/own-postgres.ts), fsync off.
export { freePort, startOwnPostgres, type OwnPostgres } from '../../src/drill/own-postgres.js';
