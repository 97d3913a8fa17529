// @ts-check
import js from '@eslint/js';
import { defineConfig } from 'eslint/config';
import tseslint from 'typescript-eslint';

const nodeGlobals = {
  process: 'readonly',
  console: 'readonly',
  Buffer: 'readonly',
  URL: 'readonly',
  URLSearchParams: 'readonly',
  setTimeout: 'readonly',
  clearTimeout: 'readonly',
  setInterval: 'readonly',
  clearInterval: 'readonly',
  setImmediate: 'readonly',
  clearImmediate: 'readonly',
  queueMicrotask: 'readonly',
  structuredClone: 'readonly',
  AbortController: 'readonly',
  AbortSignal: 'readonly',
  TextEncoder: 'readonly',
  TextDecoder: 'readonly',
  fetch: 'readonly',
  performance: 'readonly',
  globalThis: 'readonly',
};

export default defineConfig(
  { ignores: ['dist/', 'node_modules/', 'coverage/', '.scratch/'] },
  js.configs.recommended,
  tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: {
        projectService: true,
        tsconfigRootDir: import.meta.dirname,
      },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/consistent-type-imports': 'error',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
    },
  },
  {
    // The simulated world: every clock read, timer, timeout and sleep of the runtime and its SQLite
    // store goes through an injected Clock (src/util/clock.ts), and every jitter through the injected
    // \`random\`, so a virtual clock and a seed replay a schedule exactly.
    files: [
      'src/calls/**/*.ts',
      'src/runs/**/*.ts',
      'src/ledger/**/*.ts',
      'src/store/sqlite/**/*.ts',
      'src/store/rows.ts',
      'src/worker/**/*.ts',
      'src/workflows/**/*.ts',
      'src/models/**/*.ts',
      'src/tools/**/*.ts',
      'src/frameworks/**/*.ts',
    ],
    ignores: ['**/*.test.ts'],
    rules: {
      'no-restricted-globals': [
        'error',
        ...['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval'].map((name) => ({
          name,
          message: `use the injected Clock's ${name} (src/util/clock.ts), so a virtual clock drives it`,
        })),
      ],
      'no-restricted-properties': [
        'error',
        { object: 'Date', property: 'now', message: 'use the injected Clock: clock.now()' },
        { object: 'performance', property: 'now', message: 'use the injected Clock: clock.now()' },
        {
          object: 'AbortSignal',
          property: 'timeout',
          message: 'use the injected Clock: clock.timeoutSignal(ms)',
        },
        { object: 'Math', property: 'random', message: "use the injected random (the ledger's `random`)" },
        ...['setTimeout', 'setInterval'].map((property) => ({
          object: 'globalThis',
          property,
          message: `use the injected Clock's ${property} (src/util/clock.ts)`,
        })),
      ],
      'no-restricted-syntax': [
        'error',
        {
          selector: "NewExpression[callee.name='Date'][arguments.length=0]",
          message: 'use the injected Clock: new Date(clock.now()), or isoNow(clock)',
        },
      ],
      'no-restricted-imports': [
        'error',
        {
          paths: ['timers', 'node:timers', 'timers/promises', 'node:timers/promises'].map((name) => ({
            name,
            message: "use the injected Clock's setTimeout / sleep (src/util/clock.ts)",
          })),
        },
      ],
    },
  },
  {
    files: ['scripts/**/*.mjs', 'test/**/*.mjs', 'bench/**/*.mjs', 'examples/**/*.mjs', 'eslint.config.js'],
    ...tseslint.configs.disableTypeChecked,
    languageOptions: {
      ...tseslint.configs.disableTypeChecked.languageOptions,
      globals: nodeGlobals,
    },
  },
  {
    // The chat example's page: plain browser JavaScript, no build.
    files: ['examples/**/public/*.js'],
    ...tseslint.configs.disableTypeChecked,
    languageOptions: {
      ...tseslint.configs.disableTypeChecked.languageOptions,
      sourceType: 'module',
      globals: {
        document: 'readonly',
        window: 'readonly',
        fetch: 'readonly',
        EventSource: 'readonly',
        crypto: 'readonly',
        console: 'readonly',
        URL: 'readonly',
      },
    },
  },
);
