export { loadConfig, type OncelyConfig, type LoadConfigOptions } from './load-config.js';
export { configDocumentSchema, type ConfigDocument, type AgentDocument } from './config-schema.js';
