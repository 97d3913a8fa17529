import { createRequire } from 'node:module';
import { syncBuiltinESMExports } from 'node:module';

const crypto = createRequire(import.meta.url)('node:crypto') as Record<string, unknown>;

/*
 * The ids and jitter the runtime draws (tool call ids, run ids, slot holders, backoff jitter) come
 * from the schedule's seed in the simulator, so a replay makes the very same ids and so the very same
 * orderings (several reads sort by key). Node's crypto functions and Math.random are replaced, for
 * this process only, by a seeded generator; ES module imports of them see the change
 * (`syncBuiltinESMExports`).
 */

/** A small, fast, seeded generator (mulberry32): 32 random bits a call. */
function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  };
}

let next = mulberry32(1);

function fill<T extends NodeJS.ArrayBufferView>(buffer: T, offset = 0, size?: number): T {
  const bytes = new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength);
  const end = size === undefined ? bytes.length : offset + size;
  for (let i = offset; i < end; i += 1) bytes[i] = next() & 0xff;
  return buffer;
}

let installed = false;

/** Replaces the process's random sources by one seeded generator; `seed` starts it again. */
export function seedRandomness(seed: number): void {
  next = mulberry32(seed);
  if (installed) return;
  installed = true;
  const c = crypto;
  c.randomFillSync = fill;
  c.randomBytes = (size: number) => fill(Buffer.alloc(size));
  c.randomUUID = () => {
    const b = fill(Buffer.alloc(16));
    b[6] = (b[6]! & 0x0f) | 0x40;
    b[8] = (b[8]! & 0x3f) | 0x80;
    const h = b.toString('hex');
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  };
  syncBuiltinESMExports();
  Math.random = () => next() / 4_294_967_296;
}
