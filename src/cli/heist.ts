import { Command, InvalidArgumentError } from 'commander';
import Fastify from 'fastify';
import { serializerCompiler, validatorCompiler } from 'fastify-type-provider-zod';
import { routeNotFound, sendError } from '../api/http-errors.js';
import { defaultScoresFile } from '../heist/best-scores.js';
import { dollars } from '../heist/brain.js';
import { HeistGame, LEVELS, describeTrick } from '../heist/game.js';
import { playInTerminal, scoreLines } from '../heist/terminal.js';
import { DEFAULT_MAX_PLAYS, heistRoutes } from '../heist/web.js';
import { createLogger } from './logger.js';
import { stopped } from './signals.js';

interface HeistFlags {
  web?: boolean;
  host: string;
  port: number;
  level?: number[];
  auto?: boolean;
  json?: boolean;
  plays: number;
  scoresFile?: string;
}

function playsNumber(value: string): number {
  const plays = Number(value);
  if (!Number.isInteger(plays) || plays < 1 || plays > 16) {
    throw new InvalidArgumentError('--plays must be a whole number, 1-16');
  }
  return plays;
}

function levelList(value: string): number[] {
  const numbers = value.split(',').map((s) => Number(s.trim()));
  if (numbers.some((n) => !LEVELS.some((l) => l.number === n))) {
    throw new InvalidArgumentError(
      `--level takes level numbers 1-${LEVELS.length}, e.g. --level 3 or --level 1,4`,
    );
  }
  return numbers;
}

function portNumber(value: string): number {
  const port = Number(value);
  if (!Number.isInteger(port) || port < 0 || port > 65_535) {
    throw new InvalidArgumentError('--port must be 0-65535 (0: any free port)');
  }
  return port;
}

export function heistCommand(): Command {
  return new Command('heist')
    .description(
      'Heist the Agent: try to make a refund bot pay you twice; each trick is played against a naive ' +
        'retrying bot and against Penny on oncely (no API key, network or database needed)',
    )
    .option('--web', 'play in the browser: serve the game at http://HOST:PORT/heist')
    .option('--host <host>', 'with --web, the address to listen on', '127.0.0.1')
    .option('--port <port>', 'with --web, the port (0: any free port)', portNumber, 4600)
    .option(
      '--plays <n>',
      'with --web, tricks played at once (each starts processes of its own; one more answers 429)',
      playsNumber,
      DEFAULT_MAX_PLAYS,
    )
    .option(
      '--scores-file <path>',
      'in the terminal, where the best scores are kept (default $ONCELY_HEIST_SCORES, else ~/.oncely/heist-scores.json)',
    )
    .option('--level <n,...>', 'play only these levels', levelList)
    .option('--auto', "no keys: play each level's first trick and print what happened")
    .option('--json', 'with --auto, print the plays and the scoreboard as JSON')
    .action(async (flags: HeistFlags) => {
      if (flags.web === true) return serveHeist(flags);
      if (flags.auto === true) return autoPlay(flags);
      const score = await playInTerminal({
        ...(flags.level === undefined ? {} : { levels: flags.level }),
        scoresFile: flags.scoresFile ?? defaultScoresFile(),
      });
      if (!score.held || score.broken > 0) process.exitCode = 1;
    });
}

/** Every chosen level's first trick, played without keys: a check that the game holds, and a show. */
async function autoPlay(flags: HeistFlags): Promise<void> {
  const write = (text: string): void => void process.stdout.write(`${text}\n`);
  const json = flags.json === true;
  const levels = flags.level === undefined ? LEVELS : LEVELS.filter((l) => flags.level?.includes(l.number));
  const game = new HeistGame(levels, (bot, line) => {
    if (!json)
      write(`  ${(bot === 'penny' ? 'Penny' : 'naive').padEnd(6)} ${line.who.padEnd(10)} ${line.text}`);
  });
  while (!game.over) {
    const level = game.level;
    const first = level?.tricks[0];
    if (level === undefined || first === undefined) break;
    if (!json) write(`\nLevel ${level.number} \u00b7 ${level.title} \u00b7 ${describeTrick(first).name}`);
    const play = await game.play(first);
    if (!json) {
      const paid = (r: typeof play.naive): string =>
        `${r.payouts.filter((p) => !p.voided).length} paid (${dollars(r.payouts.reduce((n, p) => n + (p.voided ? 0 : p.amountCents), 0))}), ${r.recorded} recorded, goal ${r.goalMet ? 'reached' : 'not reached'}`;
      write(`  => naive bot: ${paid(play.naive)}`);
      write(`  => Penny:     ${paid(play.penny)}`);
    }
    game.next();
  }
  const score = game.scoreboard();
  if (json) write(JSON.stringify({ plays: game.plays, scoreboard: score }, null, 2));
  else write(['', 'Scoreboard', ...scoreLines(score)].join('\n'));
  if (!score.held || score.broken > 0) {
    process.stderr.write('oncely heist: Penny did not hold (or a play broke); see above\n');
    process.exitCode = 1;
  }
}

/** The game's page and API on their own server (`oncely serve` mounts the same at /heist). */
async function serveHeist(flags: HeistFlags): Promise<void> {
  const log = createLogger('oncely-heist');
  const app = Fastify({ logger: false });
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  app.setErrorHandler((error, request, reply) => sendError(error, request, reply));
  app.setNotFoundHandler((request, reply) => sendError(routeNotFound(request), request, reply));
  app.get('/', { schema: { hide: true } }, (_request, reply) => reply.redirect('/heist', 302));
  heistRoutes(app, { ...(flags.level === undefined ? {} : { levels: flags.level }), maxPlays: flags.plays });
  const address = await app.listen({ host: flags.host, port: flags.port });
  process.stdout.write(`Heist the Agent: open ${address}/heist (Ctrl-C stops)\n`);
  log.info({ address }, 'serving Heist the Agent');
  try {
    await stopped(log, 'stopping the game');
  } finally {
    await app.close();
  }
}
