import { createRequire, syncBuiltinESMExports } from 'node:module';
import { random } from '../src/drill/schedule.js';

const crypto = createRequire(import.meta.url)('node:crypto') as Record<string, unknown>;

/*
 * The ids and jitter the runtime draws (tool call ids, run ids, slot holders, backoff jitter) come
 * from the schedule's seed in the simulator, so a replay makes the very same ids and so the very same
 * orderings (several reads sort by key). Node's crypto functions and Math.random are replaced, for
 * this process only, by a seeded generator; ES module imports of them see the change
 * (`syncBuiltinESMExports`).
 */

let next = random(1);

function fill<T extends NodeJS.ArrayBufferView>(buffer: T, offset = 0, size?: number): T {
  const bytes = new Uint8Array(buffer.buffer, buffer.byteOffset, buffer.byteLength);
  const end = size === undefined ? bytes.length : offset + size;
  for (let i = offset; i < end; i += 1) bytes[i] = Math.floor(next() * 256);
  return buffer;
}

let installed = false;

/** Replaces the process's random sources by one seeded generator; `seed` starts it again. */
export function seedRandomness(seed: number): void {
  next = random(seed);
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
  Math.random = () => next();
}
