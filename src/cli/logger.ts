import { pino, type Logger } from 'pino';

/** Structured JSON log lines on stderr, so stdout stays for what a command prints. */
export function createLogger(name: string): Logger {
  return pino(
    { name, level: process.env.ONCELY_LOG_LEVEL ?? 'info' },
    pino.destination({ dest: 2, sync: true }),
  );
}
