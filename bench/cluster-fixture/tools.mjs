// The bench's cluster throughput tool: a keyed write that changes nothing outside the ledger.
import { z } from 'zod';
import { defineTool, write } from 'oncely';

export const mark = defineTool({
  name: 'mark',
  description: 'Mark an item',
  input: z.object({ n: z.number() }),
  effect: write(),
  execute: ({ n }) => ({ marked: n }),
});
