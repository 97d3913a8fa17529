export {
  KEY_STATUSES,
  DEFAULT_KEEP_FOR_MS,
  MAX_KEY_LENGTH,
  assertReceiverKey,
  type KeyStatus,
  type KeyRecord,
  type KeyClaim,
  type KeyStore,
  type BeginRequest,
  type BeginOutcome,
  type Settlement,
} from './key-store.js';
export { openKeyStore, type OpenKeyStoreOptions } from './open-key-store.js';
export { requestFingerprint } from './fingerprint.js';
