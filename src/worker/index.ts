export {
  DEFAULT_HEARTBEAT_MS,
  LIVE_HEARTBEATS,
  startWorker,
  type Worker,
  type WorkerOptions,
  type WorkerLog,
} from './worker.js';
