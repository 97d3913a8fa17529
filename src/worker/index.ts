export {
  DEFAULT_HEARTBEAT_MS,
  LIVE_HEARTBEATS,
  startWorker,
  type Worker,
  type WorkerOptions,
  type WorkerLog,
  type WorkflowAdvancer,
} from './worker.js';
