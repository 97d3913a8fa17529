export {
  crashPoint,
  setCrashPointHook,
  CRASH_POINTS,
  WORKFLOW_CRASH_POINTS,
  type CrashPointName,
} from './crash-point.js';
export { armedUnsafeSwitches, unsafeSwitch, UNSAFE_SWITCHES, type UnsafeSwitch } from './unsafe.js';
