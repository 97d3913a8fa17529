/*
 * A play's bot processes live no longer than the game that started them: a game killed outright
 * (SIGKILL, a crash) cannot stop them, so each one watches its parent and exits when it is gone.
 */

const WATCH_MS = 250;

/** Exits this process (code 1) once the process that started it is gone (it was re-parented). */
export function exitWithParent(): void {
  const parent = process.ppid;
  const watch = setInterval(() => {
    if (process.ppid !== parent) {
      process.stderr.write(`the game (pid ${parent}) is gone; exiting\n`);
      process.exit(1);
    }
  }, WATCH_MS);
  watch.unref();
}
