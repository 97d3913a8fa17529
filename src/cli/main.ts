#!/usr/bin/env node
import { runCli } from './program.js';

/** How long a failed command may take to exit on its own before it is made to (its output flushed). */
const FAILED_EXIT_LINGER_MS = 500;

const code = await runCli(process.argv);
process.exitCode = code;
// A command that failed has closed what it opened, but something it loaded may still hold the process
// open: a tools module whose top-level await never settles while it holds a socket or a timer (a
// connection that never answers). Unref'd: a process with nothing left open exits at once.
if (code !== 0) setTimeout(() => process.exit(code), FAILED_EXIT_LINGER_MS).unref();
