export {
  Runtime,
  openRuntime,
  DEFAULT_LEASE_MS,
  type RuntimeOptions,
  type StartRunRequest,
  type RecoveredRun,
  type SendMessage,
  type SentMessage,
} from './runtime.js';
export {
  uiMessages,
  userMessage,
  MAX_MESSAGE_PARTS,
  type UiMessage,
  type UiPart,
  type UserContent,
} from './conversation.js';
export { HANDED_OFF, type DriveEnd } from './drive-end.js';
export type { ModelResponseInfo } from './model-step.js';
export type { ApprovalDecision } from './decisions.js';
export { blockersOf, resumeIfReady, type Blockers } from './resume.js';
export { NOTES as HEARD_NOTES } from './heard.js';
