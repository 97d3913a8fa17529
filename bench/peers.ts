import type { BenchCase } from './case.js';

/**
 * The peers' cases (DBOS Transact, LangGraph JS), dev dependencies of the bench only. A peer that
 * cannot be loaded is said so loudly and left out; its targets then read "not measured".
 */
export async function peerCases(say: (message: string) => void): Promise<BenchCase[]> {
  const cases: BenchCase[] = [];
  const peers: [string, () => Promise<BenchCase[]>][] = [
    ['DBOS Transact', async () => (await import('./peers/dbos.js')).dbosCases()],
    ['LangGraph JS', async () => (await import('./peers/langgraph.js')).langgraphCases()],
  ];
  for (const [name, load] of peers) {
    try {
      cases.push(...(await load()));
    } catch (error) {
      say(`PEER NOT MEASURED: ${name} could not be loaded (${String(error)}); run \`npm ci\``);
    }
  }
  return cases;
}
