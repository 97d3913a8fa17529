export {
  LEDGER_STATUSES,
  UNKNOWN_STATUSES,
  EFFECT_KINDS,
  isUnknownStatus,
  isLedgerStatus,
  type LedgerStatus,
  type EffectKind,
} from './statuses.js';
export {
  TRANSITIONS,
  TRANSITION_VIAS,
  RESERVABLE_STATUSES,
  isAllowedTransition,
  assertTransition,
  settles,
  contradicts,
  type Observation,
  type TransitionVia,
} from './transitions.js';
export {
  EVENT_KINDS,
  type JsonValue,
  type Actor,
  type ErrorInfo,
  type ToolExecutionRecord,
  type LedgerEvent,
  type LedgerEventKind,
} from './record.js';
export { canonicalJson, toJsonValue, argsDigest } from './canonical-json.js';
export {
  isValidId,
  assertTenantId,
  assertCallIds,
  idempotencyKey,
  compensationKey,
  parseKey,
  type ParsedKey,
} from './ids.js';
export {
  CALL_ACTIONS,
  CALL_DECISION_TABLE,
  DEFAULT_LANDING_MARGIN_MS,
  DEFAULT_MAX_ATTEMPTS,
  attemptMayLand,
  decideCall,
  decideHookAnswer,
  landsUntil,
  attemptDeadline,
  isUnknownCall,
  type CallAction,
  type CallDecision,
  type CallFacts,
  type HookAnswerAction,
} from './call-decision.js';
export {
  REPEAT_POLICIES,
  DEFAULT_REPEAT_POLICY,
  repeatDigest,
  earlierState,
  earlierOf,
  type RepeatPolicy,
  type RepeatScope,
  type EarlierState,
} from './repeats.js';
