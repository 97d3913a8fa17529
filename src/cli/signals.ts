import type { Logger } from 'pino';

/**
 * Resolves on the first SIGTERM or SIGINT, saying `stopping`; a second signal exits at once (runs in
 * flight are recovered by another process when their lease expires).
 */
export function stopped(log: Logger, stopping: string): Promise<void> {
  return new Promise((resolve) => {
    let signals = 0;
    const onSignal = (signal: NodeJS.Signals): void => {
      signals += 1;
      if (signals > 1) {
        log.warn(
          { signal },
          'second signal: exiting now; runs in flight are recovered when their lease expires',
        );
        process.exit(130);
      }
      log.info({ signal }, stopping);
      resolve();
    };
    process.on('SIGTERM', onSignal);
    process.on('SIGINT', onSignal);
  });
}
