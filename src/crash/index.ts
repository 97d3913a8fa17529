export { crashPoint, CRASH_POINTS, type CrashPointName } from './crash-point.js';
