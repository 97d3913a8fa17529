export { onceOnly, type OnceOnlyOptions } from './once-only.js';
export {
  openKeyStore,
  DEFAULT_KEEP_FOR_MS,
  type KeyStore,
  type KeyRecord,
  type KeyStatus,
  type Settlement,
  type OpenKeyStoreOptions,
} from '../../receiver/index.js';
export {
  MCP_KEY_META,
  MCP_KEY_ARGUMENT,
  MCP_NOT_APPLIED_META,
  MCP_REPLAYED_META,
  MCP_KEY_REFUSAL_META,
  MCP_KEY_STATUS_TOOL,
  type McpKeyStatus,
} from '../mcp/meta.js';
