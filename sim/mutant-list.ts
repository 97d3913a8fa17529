/*
 * The bugs outside review found in oncely, each as the smallest edit of today's code that puts it
 * back. `npm run sim:mutants` applies one at a time to a copy of the sources and runs the simulator
 * on it. Each edit's `find` must occur exactly once in its file: when the code moves, the runner
 * says so and this list is updated with it.
 */

export interface Edit {
  readonly file: string;
  readonly find: string;
  readonly replace: string;
}

export interface Mutant {
  readonly name: string;
  /** The bug, as it was found. */
  readonly bug: string;
  readonly edits: readonly Edit[];
  /**
   * Test-only switches to arm (`ONCELY_UNSAFE_TEST_SWITCHES`, src/crash/unsafe.ts), for a bug that is
   * more than one edit: the switch puts the whole of it back.
   */
  readonly switches?: readonly string[];
}

export const MUTANTS: readonly Mutant[] = [
  {
    name: 'in-flight-rerun',
    bug: "a call whose attempt is still running elsewhere (another driver's live lease, an attempt younger than its timeout plus the margin) is taken to be unable to land, so it is asked of its hook or run again while in flight",
    edits: [
      {
        file: 'src/ledger/call-decision.ts',
        find: 'if (input.inFlightHere || input.otherLeaseLive) return true;',
        replace: 'if (input.inFlightHere) return true;',
      },
      {
        file: 'src/ledger/call-decision.ts',
        find: 'return input.nowMs < landsUntil(record, input.marginMs);',
        replace: 'return false && input.nowMs < landsUntil(record, input.marginMs);',
      },
    ],
  },
  {
    name: 'double-compensation',
    bug: 'a compensation asked for again while the first is still running runs the compensate hook a second time',
    edits: [
      {
        file: 'src/calls/compensate.ts',
        find: "if (reservation.kind === 'existing') return answer(ledger, record, reservation.record);",
        replace:
          "if (reservation.kind === 'existing' && reservation.record.status !== 'started') return answer(ledger, record, reservation.record);",
      },
    ],
  },
  {
    name: 'live-call-resolve',
    bug: 'an operator settles a call whose attempt is still running (no CALL_IN_FLIGHT), so a `failed` can stand beside the effect that lands next',
    edits: [
      {
        file: 'src/calls/resolve.ts',
        find: '? await stillRunning(ledger, record)',
        replace: '? undefined && (await stillRunning(ledger, record))',
      },
    ],
  },
  {
    name: 'thawed-driver',
    bug: 'a driver that froze past its lease drives on when it thaws: it never learns the lease is lost (its tools are not aborted), and when a write of its is fenced out it reserves the step anyway and starts the attempts',
    // More than one edit (the lease, the fence, the drive loop): the `ignore-lost-lease` switch,
    // which the drill's own tests use for the same bug, puts it back whole.
    edits: [],
    switches: ['ignore-lost-lease'],
  },
  {
    name: 'workflow-retry-repeats',
    bug: "a workflow node with `recovery_policy: retry` runs again by itself after its failed run's credit took effect: a fresh run with new keys credits twice",
    edits: [
      {
        file: 'src/workflows/plan.ts',
        find: 'if (standing.length > 0) {',
        replace: 'if (standing.length > 0 && false) {',
      },
    ],
  },
  {
    name: 'mcp-error-not-attempted',
    bug: 'a JSON-RPC error from an MCP server (e.g. -32602, which servers answered after running the tool) is read as "not attempted": the call is recorded failed while its effect stands',
    edits: [
      {
        file: 'src/frameworks/mcp/mcp-call.ts',
        find: 'if (codeOf(error) === METHOD_NOT_FOUND) {',
        replace: "if (codeOf(error) === METHOD_NOT_FOUND || typeof codeOf(error) === 'number') {",
      },
    ],
  },
  {
    name: 'leaked-tool-slot',
    bug: 'a tool slot taken for a wave that then throws (a store error, a fenced reserve) is never let go, and its renewals go on for the life of the process',
    edits: [
      {
        file: 'src/calls/tool-slots.ts',
        find: '} finally {',
        replace: '} catch (error) {\n      throw error;\n    } {',
      },
    ],
  },
  {
    name: 'abort-drops-outcomes',
    bug: 'a step stopped while a later wave waits for a slot (the lease lost, a cancel, a store error) throws without recording the outcomes of the calls of earlier waves, which stay `started`',
    // Two guards close it today: the outcomes in hand recorded before the throw, and each wave's
    // outcomes recorded as soon as a later wave follows (recordWave). The bug is both taken out.
    edits: [
      {
        file: 'src/runs/execute-step.ts',
        find: 'await recordInHand(driver, progress);',
        replace: 'void recordInHand;',
      },
      {
        file: 'src/runs/execute-step.ts',
        find: 'if (ran < plan.ready.length) await recordWave(driver.ledger, settled);',
        replace: 'void recordWave;',
      },
    ],
  },
  {
    name: 'unguarded-repeat',
    bug: 'the model makes the same call again (a new tool call id, so a new key) after the first took effect, and it goes out: a second credit nobody approved',
    edits: [
      {
        file: 'src/calls/repeats.ts',
        find: 'const guardedKeys = new Set(guarded.map((c) => c.request.idempotencyKey));',
        replace: 'const guardedKeys = new Set<string>();',
      },
    ],
  },
  {
    name: 'repeat-of-unknown-runs',
    bug: 'a repeat of a call whose outcome is still unknown is not waited for: under ask it is asked about at once, and an approval lets it out beside an effect that lands later',
    edits: [
      {
        file: 'src/ledger/call-decision.ts',
        find: "when: (f) => !f.record && f.repeat?.earlier === 'unknown',",
        replace: "when: (f) => !f.record && f.repeat?.earlier === 'unknown' && false,",
      },
    ],
  },
  {
    name: 'guarded-inline-repeat',
    bug: "a guarded call's reservation that checks its repeats itself (reserveUnlessRepeat) reserves whatever stands in its run or conversation, so a repeat of a credit that took effect goes out with no approval",
    edits: [
      {
        file: 'src/store/ledger-sql.ts',
        find: 'WHERE NOT EXISTS (SELECT 1 FROM earlier)',
        replace: 'WHERE true',
      },
      {
        file: 'src/store/sqlite/ledger.ts',
        find: 'if (!earlier) return this.reserveOne(request, actor);',
        replace: 'if (!earlier || true) return this.reserveOne(request, actor);',
      },
    ],
  },
  {
    name: 'guarded-reopen-unchecked',
    bug: 'a guarded call whose key failed (its hook found it not taken) is made again and re-opened without a repeat check, after an identical call of its run took effect: a second credit nobody approved',
    edits: [
      {
        file: 'src/calls/execute-tool-call.ts',
        find: "if (options.caller === 'guarded') await assertReopenRepeatsNothing(",
        replace: "if (options.caller === 'guarded' && false) await assertReopenRepeatsNothing(",
      },
    ],
  },
];
