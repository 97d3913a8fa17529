/** Runs synchronous statements as a promise: a refusal or a database error rejects, never throws. */
export function settle<T>(work: () => T): Promise<T> {
  return new Promise<T>((resolve) => resolve(work()));
}
