import { Downstream, DOWNSTREAM_KINDS, type DownstreamKind } from './downstream.js';

/*
 * One downstream service as a process of its own: `node downstream-main.js <kind> <lateMs> <delayMs>`.
 * It prints `listening <url>` once it listens, serves its books at GET /books, and stops on SIGTERM.
 */

const [kindArg = '', lateArg = '2000', delayArg = '0'] = process.argv.slice(2);
if (!(DOWNSTREAM_KINDS as readonly string[]).includes(kindArg)) {
  process.stderr.write(
    `downstream: the kind must be one of ${DOWNSTREAM_KINDS.join(', ')}, got "${kindArg}"\n`,
  );
  process.exit(2);
}
const service = await Downstream.start({
  kind: kindArg as DownstreamKind,
  lateMs: Number(lateArg),
  delayMs: Number(delayArg),
});
process.stdout.write(`listening ${service.url}\n`);
const stop = (): void => {
  void service.close().then(() => process.exit(0));
};
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
