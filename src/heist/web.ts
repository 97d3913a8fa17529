import { randomBytes } from 'node:crypto';
import type { FastifyInstance, FastifyReply } from 'fastify';
import type { ZodTypeProvider } from 'fastify-type-provider-zod';
import { z } from 'zod/v4';
import { OncelyError } from '../errors/index.js';
import { GOALS, HeistGame, LEVELS, describeTrick, type TrickPlay } from './game.js';
import { TRICK_IDS } from './tricks.js';
import { HEIST_PAGE, HEIST_SCRIPT, HEIST_STYLE } from './web-page.js';

/*
 * The game in a browser: a page at /heist and a small JSON API under /heist/api that the page calls.
 * Games live in this process's memory (the last 16); a server plays at most `maxPlays` tricks at once
 * (a play starts processes and services of its own, all on loopback, none touching the server's
 * store), and closing the server waits for the plays in flight, whose processes are stopped.
 */

/** What the page may do: its own script, style and calls, nothing else. */
const HEIST_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "connect-src 'self'",
  "base-uri 'none'",
  "form-action 'none'",
  "frame-ancestors 'none'",
].join('; ');

const MAX_GAMES = 16;

const gameParams = z.strictObject({ id: z.string().regex(/^game_[a-f0-9]{16}$/) });
const playBody = z.strictObject({
  trick: z.enum(TRICK_IDS),
  choice: z
    .string()
    .regex(/^[a-z-]{1,32}$/)
    .optional(),
});

interface Kept {
  readonly game: HeistGame;
  used: number;
  /** A trick of this game is being played (a game plays one at a time). */
  busy: boolean;
}

/** A game as the page reads it. */
function view(id: string, game: HeistGame): Record<string, unknown> {
  const level = game.level;
  return {
    gameId: id,
    over: game.over,
    levels: LEVELS.length,
    lastLevel: level !== undefined && level === game.levels.at(-1),
    level:
      level === undefined
        ? null
        : {
            number: level.number,
            title: level.title,
            goal: level.goal,
            goalText: GOALS[level.goal],
            scene: level.scene,
            budget: level.budget,
            tricks: level.tricks.map((trick) => ({ id: trick, ...describeTrick(trick) })),
          },
    tricksLeft: game.tricksLeft,
    cleared: game.cleared,
    elapsedMs: game.elapsedMs,
    plays: game.plays.map(playView),
    scoreboard: game.scoreboard(),
  };
}

function playView(play: TrickPlay): Record<string, unknown> {
  return { ...play, ...describeTrick(play.trick) };
}

export interface HeistRoutesOptions {
  /** The levels a new game plays (numbers); all by default. */
  readonly levels?: readonly number[];
  /** Tricks played at once on this server; one more answers 429 `HEIST_BUSY`. Default 1. */
  readonly maxPlays?: number;
}

export const DEFAULT_MAX_PLAYS = 1;

/** Registers /heist (the page, its assets) and /heist/api (the game) on a Fastify app. */
export function heistRoutes(app: FastifyInstance, options: HeistRoutesOptions = {}): void {
  // Params and bodies are checked by their zod schemas (the app's validator compiler) before a handler runs.
  const api = app.withTypeProvider<ZodTypeProvider>();
  const games = new Map<string, Kept>();
  const maxPlays = options.maxPlays ?? DEFAULT_MAX_PLAYS;
  if (!Number.isInteger(maxPlays) || maxPlays < 1) throw new Error('maxPlays is a whole number, 1 or more');
  const playing = new Set<Promise<unknown>>();
  // A server that closes waits for its plays: each stops its processes and services as it ends.
  app.addHook('onClose', async () => {
    await Promise.allSettled([...playing]);
  });
  const levels =
    options.levels === undefined ? LEVELS : LEVELS.filter((l) => options.levels?.includes(l.number));
  const hide = { schema: { hide: true } };
  const find = (id: string): Kept => {
    const kept = games.get(id);
    if (kept === undefined) {
      throw new OncelyError(
        'HEIST_GAME_NOT_FOUND',
        `no game ${id}; games are kept in memory, the last ${MAX_GAMES}`,
      );
    }
    kept.used = Date.now();
    return kept;
  };
  const asset = (body: string, type: string) => (_request: unknown, reply: FastifyReply) =>
    reply
      .header('content-security-policy', HEIST_CSP)
      .header('cache-control', 'no-store')
      .type(type)
      .send(body);

  api.get('/heist', hide, asset(HEIST_PAGE, 'text/html; charset=utf-8'));
  api.get('/heist/app.js', hide, asset(HEIST_SCRIPT, 'text/javascript; charset=utf-8'));
  api.get('/heist/style.css', hide, asset(HEIST_STYLE, 'text/css; charset=utf-8'));

  api.post('/heist/api/games', hide, async (_request, reply) => {
    if (games.size >= MAX_GAMES) {
      const oldest = [...games.entries()].sort((a, b) => a[1].used - b[1].used)[0];
      if (oldest !== undefined) games.delete(oldest[0]);
    }
    const id = `game_${randomBytes(8).toString('hex')}`;
    const game = new HeistGame(levels);
    games.set(id, { game, used: Date.now(), busy: false });
    return reply.code(201).send(view(id, game));
  });

  const withGame = { schema: { hide: true, params: gameParams } };
  api.get('/heist/api/games/:id', withGame, (request) =>
    view(request.params.id, find(request.params.id).game),
  );

  api.post(
    '/heist/api/games/:id/plays',
    { schema: { hide: true, params: gameParams, body: playBody } },
    async (request) => {
      const { id } = request.params;
      const kept = find(id);
      const { game } = kept;
      const { trick, choice } = request.body;
      if (kept.busy) throw new OncelyError('HEIST_BUSY', `game ${id} is playing a trick; one at a time`);
      game.playable(trick, choice);
      if (playing.size >= maxPlays) {
        throw new OncelyError(
          'HEIST_BUSY',
          `${playing.size} trick(s) are being played on this server, its most at once; try again shortly`,
        );
      }
      const played = game.play(trick, choice);
      playing.add(played);
      kept.busy = true;
      try {
        const play = await played;
        return { play: playView(play), game: view(id, game) };
      } finally {
        kept.busy = false;
        playing.delete(played);
      }
    },
  );

  api.post('/heist/api/games/:id/next', withGame, (request) => {
    const { id } = request.params;
    const { game } = find(id);
    game.next();
    return view(id, game);
  });
}
