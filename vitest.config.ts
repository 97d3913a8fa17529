import { defineConfig } from 'vitest/config';

// Two groups, one after the other: the suite, then the drills (test/drill). A drill keeps both cores
// busy with a dozen processes for a minute; run beside the crash and cluster tests, whose processes
// wait on leases and timeouts, it made them late.
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
          exclude: ['test/drill/**', '**/node_modules/**'],
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
    ],
  },
});
