import { mkdirSync, readFileSync, renameSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { dirname, join } from 'node:path';
import { z } from 'zod/v4';
import type { Scoreboard } from './game.js';

/*
 * The terminal game's best scores, kept on this machine in a small JSON file (the page keeps its own
 * in the browser). A file that cannot be read is started again, never a reason to stop the game.
 */

const KEPT = 5;

const bestSchema = z.object({
  score: z.number().int(),
  cleared: z.number().int().min(0),
  levels: z.number().int().min(1),
  seconds: z.number().int().min(0),
  at: z.string(),
});
export type BestScore = z.infer<typeof bestSchema>;

const fileSchema = z.object({ best: z.array(bestSchema) });

/** Where the scores are kept: `$ONCELY_HEIST_SCORES`, else `~/.oncely/heist-scores.json`. */
export function defaultScoresFile(): string {
  return process.env.ONCELY_HEIST_SCORES ?? join(homedir(), '.oncely', 'heist-scores.json');
}

/** The best scores kept in `file`, best first (none when it is missing or unreadable). */
export function readBestScores(file: string): BestScore[] {
  try {
    return fileSchema.parse(JSON.parse(readFileSync(file, 'utf8'))).best;
  } catch {
    return [];
  }
}

/** Keeps a finished game's score among the best; answers the list and whether it is the best. */
export function rememberScore(
  file: string,
  score: Scoreboard,
  at: Date = new Date(),
): { best: BestScore[]; isBest: boolean } {
  const entry: BestScore = {
    score: score.score,
    cleared: score.levelsCleared,
    levels: score.levels,
    seconds: Math.floor(score.elapsedMs / 1_000),
    at: at.toISOString(),
  };
  const best = [...readBestScores(file), entry]
    .sort((a, b) => b.score - a.score || a.seconds - b.seconds)
    .slice(0, KEPT);
  mkdirSync(dirname(file), { recursive: true });
  // Through a rename: a reader never sees half a file.
  writeFileSync(`${file}.${process.pid}`, `${JSON.stringify({ best }, null, 2)}\n`);
  renameSync(`${file}.${process.pid}`, file);
  return { best, isBest: best[0] === entry };
}
