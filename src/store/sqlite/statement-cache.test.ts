import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { cacheStatements, MAX_STATEMENTS } from './statement-cache.js';

function connection(): Database.Database {
  const db = new Database(':memory:');
  cacheStatements(db);
  return db;
}

describe('cacheStatements', () => {
  it('prepares a text once, and each use runs with its own parameters', () => {
    const db = connection();
    db.exec('CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER)');
    const insert = db.prepare('INSERT INTO t (k, v) VALUES (?, ?)');
    expect(db.prepare('INSERT INTO t (k, v) VALUES (?, ?)')).toBe(insert);
    insert.run('a', 1);
    db.prepare('INSERT INTO t (k, v) VALUES (?, ?)').run('b', 2);
    const get = (k: string) => db.prepare<[string], { v: number }>('SELECT v FROM t WHERE k = ?').get(k);
    expect([get('a')?.v, get('b')?.v, get('c')]).toEqual([1, 2, undefined]);
    db.close();
  });

  it('compiles a kept statement again when the schema changed under it', () => {
    const db = connection();
    db.exec('CREATE TABLE t (k TEXT PRIMARY KEY)');
    db.prepare('INSERT INTO t (k) VALUES (?)').run('a');
    expect(db.prepare('SELECT * FROM t').all()).toEqual([{ k: 'a' }]);
    db.exec('ALTER TABLE t ADD COLUMN v INTEGER DEFAULT 7');
    expect(db.prepare('SELECT * FROM t').all()).toEqual([{ k: 'a', v: 7 }]);
    db.close();
  });

  it(`keeps at most ${MAX_STATEMENTS} statements, letting the oldest go`, () => {
    const db = connection();
    const first = db.prepare('SELECT 0');
    for (let i = 1; i < MAX_STATEMENTS; i += 1) db.prepare(`SELECT ${i}`);
    expect(db.prepare('SELECT 0')).toBe(first);
    db.prepare(`SELECT ${MAX_STATEMENTS}`);
    expect(db.prepare('SELECT 0')).not.toBe(first);
    db.close();
  });
});
