export { startWorker, type Worker, type WorkerOptions, type WorkerLog } from './worker.js';
