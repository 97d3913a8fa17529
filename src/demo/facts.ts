import { isDeepStrictEqual } from 'node:util';

/** One thing the demo promises, and what it found. */
export interface Fact {
  readonly what: string;
  readonly expected: unknown;
  readonly actual: unknown;
  readonly ok: boolean;
}

export function fact(what: string, expected: unknown, actual: unknown): Fact {
  return { what, expected, actual, ok: isDeepStrictEqual(expected, actual) };
}

/** One ledger event, as the narration shows it. */
export interface Transition {
  readonly kind: string;
  /** What moved it: reserve, outcome, reconcile, resolve, compensate. */
  readonly via: string | null;
  readonly to: string | null;
  readonly actor: string;
  readonly reason: string | null;
}

/** One call of a scenario: its key, where it ended, and how it got there. */
export interface CallStory {
  readonly key: string;
  readonly toolName: string;
  readonly status: string;
  readonly attempt: number;
  readonly history: readonly Transition[];
}

/** A tool result the model received. */
export interface Heard {
  readonly toolName: string;
  readonly status: string;
  readonly value: Record<string, unknown>;
}

export interface ScenarioReport {
  readonly number: number;
  readonly title: string;
  readonly runId: string;
  readonly runStatus: string;
  readonly calls: readonly CallStory[];
  readonly heard: readonly Heard[];
  /** The model's final answer. */
  readonly answer: string;
  /** What the billing service itself counts for this run's credits. */
  readonly billing: { readonly credits: number; readonly standing: number; readonly voids: number };
  /** Things the operator did, over the HTTP API. */
  readonly operator: readonly string[];
  readonly facts: readonly Fact[];
}

export const passed = (report: ScenarioReport): boolean => report.facts.every((f) => f.ok);
