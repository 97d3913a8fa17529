import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { stringify } from 'yaml';

/*
 * The drill's oncely.yaml, written into its working directory for its workers and its API process:
 * two agents on scripted models that take as long as a network model would, calling the drill's
 * tools (tools.ts) in several steps, several calls a step, pausing on an unknown call.
 */

/**
 * The agents: a plain one, and one whose refund waits for approval and who pings a partner that never
 * applies. Named after the drill (`drill-<id>`), so only its own workers claim its runs, even where
 * another drill or a deployment shares the database.
 */
export function agentNames(id: string): { plain: string; approval: string } {
  return { plain: `drill-${id}`, approval: `drill-${id}-approval` };
}

export interface DrillTimings {
  /** The workers' lease. */
  readonly leaseMs: number;
  /** The tools' timeout. */
  readonly toolTimeoutMs: number;
  /** How long the late and the never-applying services take to answer (past the timeout). */
  readonly lateMs: number;
  /** How long each model response takes. */
  readonly modelMs: number;
  /** How long an attempt past its timeout may still land. */
  readonly landingMarginMs: number;
  /** How long the keyed and unkeyed services take to answer once they applied an effect. */
  readonly serviceMs: number;
}

export const DEFAULT_TIMINGS: DrillTimings = {
  leaseMs: 2_000,
  toolTimeoutMs: 800,
  lateMs: 1_200,
  modelMs: 120,
  landingMarginMs: 300,
  serviceMs: 80,
};

const TOOLS = fileURLToPath(new URL('./tools.js', import.meta.url));

export function writeDrillConfig(
  dir: string,
  id: string,
  timings: DrillTimings,
  maxDriveAttempts?: number,
): string {
  const names = agentNames(id);
  const plain = [
    {
      text: 'Looking the order up, crediting and charging.',
      toolCalls: [
        { toolName: 'lookup', input: { order: 'o-1' } },
        { toolName: 'credit', input: { amountCents: 2500 } },
        { toolName: 'charge', input: { amountCents: 700 } },
      ],
    },
    { text: 'Telling the warehouse.', toolCalls: [{ toolName: 'notify', input: { amountCents: 100 } }] },
    {
      text: 'One more credit.',
      toolCalls: [
        { toolName: 'credit', input: { amountCents: 300 } },
        { toolName: 'lookup', input: { order: 'o-2' } },
      ],
    },
    { text: 'Done.' },
  ];
  const approval = [
    plain[0],
    {
      text: 'Refunding (once approved), and pinging the partner.',
      toolCalls: [
        { toolName: 'refund', input: { amountCents: 1500 } },
        { toolName: 'ping', input: { amountCents: 1 } },
        { toolName: 'notify', input: { amountCents: 100 } },
      ],
    },
    { text: 'Done.' },
  ];
  const config = {
    tools: TOOLS,
    models: {
      plain: { provider: 'scripted', latency_ms: timings.modelMs, steps: plain },
      approval: { provider: 'scripted', latency_ms: timings.modelMs, steps: approval },
    },
    agents: [
      {
        name: names.plain,
        instructions: 'Serve the customer: look the order up, credit, charge, notify.',
        model: 'plain',
        tools: ['lookup', 'credit', 'charge', 'notify'],
        tool_policy: { on_indeterminate: 'pause' },
      },
      {
        name: names.approval,
        instructions: 'Serve the customer: credit, charge, refund once approved, ping the partner.',
        model: 'approval',
        tools: ['lookup', 'credit', 'charge', 'notify', 'refund', 'ping'],
        tool_policy: { on_indeterminate: 'pause' },
      },
    ],
    runtime: {
      landing_margin_ms: timings.landingMarginMs,
      ...(maxDriveAttempts === undefined ? {} : { max_drive_attempts: maxDriveAttempts }),
    },
  };
  const file = join(dir, 'oncely.yaml');
  writeFileSync(file, `# Written by oncely drill.\n${stringify(config)}`);
  return file;
}
