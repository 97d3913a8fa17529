export {
  mcpTools,
  effectOfAnnotations,
  MCP_KEY_META,
  MCP_KEY_ARGUMENT,
  MCP_NOT_APPLIED_META,
  type McpClientLike,
  type McpToolInfo,
  type McpToolAnnotations,
  type McpCallResult,
  type McpToolsOptions,
} from './mcp-tools.js';
