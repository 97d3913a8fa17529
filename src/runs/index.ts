export { Runtime, openRuntime } from './runtime.js';
export { DEFAULT_LEASE_MS, type RuntimeOptions } from './runtime-options.js';
export type { StartRunRequest } from './runtime-start.js';
export type { RecoveredRun } from './runtime-drives.js';
export type { SendMessage, SentMessage } from './runtime-send.js';
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
export type { RepeatInfo } from './settle-step.js';
export type { ApprovalDecision } from './decisions.js';
export { blockersOf, resumeIfReady, type Blockers } from './resume.js';
export { NOTES as HEARD_NOTES } from './heard.js';
