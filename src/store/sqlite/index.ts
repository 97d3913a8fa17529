export { SqliteStore } from './sqlite-store.js';
