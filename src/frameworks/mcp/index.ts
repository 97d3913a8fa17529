export {
  mcpTools,
  effectOfAnnotations,
  type McpClientLike,
  type McpToolInfo,
  type McpToolAnnotations,
  type McpToolsOptions,
} from './mcp-tools.js';
export { MCP_OUTPUT_MISMATCH_NOTE, type McpCallResult, type McpCallParams } from './mcp-call.js';
export {
  MCP_KEY_META,
  MCP_KEY_ARGUMENT,
  MCP_NOT_APPLIED_META,
  MCP_REPLAYED_META,
  MCP_KEY_REFUSAL_META,
  MCP_KEY_STATUS_TOOL,
  type McpKeyStatus,
} from './meta.js';
export { mcpToolName, PROVIDER_TOOL_NAME } from './tool-names.js';
