import { openStore, type Store } from '../../src/store/index.js';
import { createTestDatabase, tempSqlitePath } from './databases.js';

/** A migrated store of its own for one test file: a fresh SQLite file or a fresh PostgreSQL database. */
export interface OpenedStore {
  readonly url: string;
  readonly store: Store;
  cleanup(): Promise<void>;
}

export type StoreKind = 'sqlite' | 'postgres';

export async function openTestStore(kind: StoreKind, label: string): Promise<OpenedStore> {
  if (kind === 'sqlite') {
    const file = tempSqlitePath(label);
    const url = `sqlite:${file.path}`;
    const store = await openStore(url, { migrate: true });
    return { url, store, cleanup: async () => (await store.close(), file.cleanup()) };
  }
  const db = await createTestDatabase(label);
  const store = await openStore(db.url, { migrate: true });
  return { url: db.url, store, cleanup: async () => (await store.close(), await db.drop()) };
}

/** For `describe.each(STORE_KINDS)`: every test of the file runs on both stores. */
export const STORE_KINDS: readonly StoreKind[] = ['sqlite', 'postgres'];
