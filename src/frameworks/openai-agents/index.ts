export { DurableAgentRun, durableAgentRun, type DurableAgentRunOptions } from './durable-agent-run.js';
