export { FILE_CHECK_MS, SqliteStore } from './sqlite-store.js';
