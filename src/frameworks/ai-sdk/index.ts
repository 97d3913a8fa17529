export { DurableLoop, durableLoop, type DurableLoopOptions, type LoopStop } from './durable-loop.js';
export { heardOf, type Heard } from './guarded-tool.js';
export type { RecordedResponse } from './recorded-response.js';
export type { LoopStep } from '../../store/index.js';
