/** One server-sent event as a client reads it: its id (absent for a delta), its name and its JSON data. */
export interface SseEvent {
  readonly id: string | undefined;
  readonly event: string;
  readonly data: Record<string, unknown>;
}

/**
 * Reads a server-sent event stream until it ends, or until `until` says stop (then the connection
 * is closed); `onEvent` is told of each event as it arrives. Comments and keep-alives are skipped.
 */
export async function readSse(
  response: Response,
  options: { until?: (events: SseEvent[]) => boolean; onEvent?: (event: SseEvent) => void } = {},
): Promise<SseEvent[]> {
  const events: SseEvent[] = [];
  const reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = '';
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buffer += value;
    for (let end = buffer.indexOf('\n\n'); end >= 0; end = buffer.indexOf('\n\n')) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const fields = new Map<string, string>();
      for (const line of block.split('\n')) {
        if (line.startsWith(':') || !line.includes(': ')) continue;
        fields.set(line.slice(0, line.indexOf(': ')), line.slice(line.indexOf(': ') + 2));
      }
      const name = fields.get('event');
      if (name === undefined) continue;
      const event: SseEvent = {
        id: fields.get('id'),
        event: name,
        data: JSON.parse(fields.get('data') ?? 'null') as Record<string, unknown>,
      };
      events.push(event);
      options.onEvent?.(event);
    }
    if (options.until?.(events) === true) {
      await reader.cancel();
      break;
    }
  }
  return events;
}
