export { ERROR_CODES, type ErrorCode } from './codes.js';
export {
  OncelyError,
  ToolNotAttemptedError,
  ToolContractError,
  isOncelyError,
  errorInfo,
} from './oncely-error.js';
