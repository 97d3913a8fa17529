import { defineConfig } from 'vitest/config';

// Three groups, one after the other: the suite, the drills (test/drill), then the console in a
// browser (test/console). A drill keeps both cores busy with a dozen processes for a minute; run
// beside the crash and cluster tests, whose processes wait on leases and timeouts, it made them late.
export default defineConfig({
  test: {
    globalSetup: ['test/support/global-setup.ts'],
    testTimeout: 60_000,
    hookTimeout: 120_000,
    pool: 'forks',
    watch: false,
    projects: [
      {
        extends: true,
        test: {
          name: 'suite',
          include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
          exclude: ['test/drill/**', 'test/console/**', 'test/heist/**', '**/node_modules/**'],
          sequence: { groupOrder: 0 },
        },
      },
      {
        extends: true,
        test: {
          name: 'drill',
          include: ['test/drill/**/*.test.ts'],
          sequence: { groupOrder: 1 },
        },
      },
      // The console and the Heist game (Chromium, a terminal), last and alone: a browser beside the
      // drills would slow both, and the game's levels kill and freeze processes on leases of a second.
      {
        extends: true,
        test: {
          name: 'browser',
          include: ['test/console/**/*.test.ts', 'test/heist/**/*.test.ts'],
          sequence: { groupOrder: 2 },
        },
      },
    ],
  },
});
