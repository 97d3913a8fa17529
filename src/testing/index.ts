/** Test helpers: `import { assertToolContract } from 'oncely/testing'`. */
export {
  assertToolContract,
  type ToolContractOptions,
  type ToolContractReport,
} from './assert-tool-contract.js';
export { ToolContractError } from '../errors/index.js';
