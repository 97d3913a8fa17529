// The chat example's backend: serves the page and passes its requests on to `oncely serve`, adding
// the API key (the browser never holds one). A real product would put its own login in front.
//
//   ONCELY_API_URL=http://127.0.0.1:8080 ONCELY_API_KEY=<operator key> \
//   SUPERVISOR_API_KEY=<operator key of the supervisor> node examples/chat/server.mjs
import { createServer } from 'node:http';
import { readFile } from 'node:fs/promises';
import { Readable } from 'node:stream';
import { randomUUID } from 'node:crypto';

const API = (process.env.ONCELY_API_URL ?? 'http://127.0.0.1:8080').replace(/\/$/, '');
const KEY = process.env.ONCELY_API_KEY;
const SUPERVISOR_KEY = process.env.SUPERVISOR_API_KEY ?? KEY;
const AGENT = process.env.CHAT_AGENT ?? 'penny';
if (!KEY) {
  console.error(
    'set ONCELY_API_KEY to an operator key of `oncely serve` (oncely keys create --role operator)',
  );
  process.exit(2);
}

const PUBLIC = new URL('./public/', import.meta.url);
const FILES = {
  '/': ['index.html', 'text/html'],
  '/app.js': ['app.js', 'text/javascript'],
  '/chat.css': ['chat.css', 'text/css'],
};
const ID = /^[A-Za-z0-9_.-]{1,128}$/;

/** Calls `oncely serve`; answers with its status and JSON body. */
async function api(method, path, body, key = KEY) {
  const response = await fetch(`${API}${path}`, {
    method,
    headers: {
      authorization: `Bearer ${key}`,
      ...(body === undefined ? {} : { 'content-type': 'application/json' }),
    },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
  });
  return { status: response.status, body: await response.json() };
}

function send(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json', 'cache-control': 'no-store' });
  res.end(JSON.stringify(body));
}

/** A request the page sent wrongly: answered 400, not blamed on the API. */
class BadRequest extends Error {}

async function readJson(req) {
  let text = '';
  for await (const chunk of req) {
    text += chunk;
    if (text.length > 64 * 1024) throw new BadRequest('body too large');
  }
  try {
    return JSON.parse(text || '{}');
  } catch {
    throw new BadRequest('the body is not JSON');
  }
}

const server = createServer(async (req, res) => {
  try {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const parts = url.pathname.split('/').filter(Boolean);
    const file = FILES[url.pathname];
    if (req.method === 'GET' && file !== undefined) {
      const [name, type] = file;
      res.writeHead(200, {
        'content-type': `${type}; charset=utf-8`,
        'content-security-policy': "default-src 'self'; connect-src 'self'",
        'x-content-type-options': 'nosniff',
      });
      res.end(await readFile(new URL(name, PUBLIC)));
      return;
    }
    // POST /chat {message, client_message_id}: a new conversation (a run; its id from the client's).
    if (req.method === 'POST' && url.pathname === '/chat') {
      const { message, client_message_id: clientId } = await readJson(req);
      if (typeof message !== 'string' || !ID.test(clientId ?? ''))
        return send(res, 400, { error: 'message and client_message_id' });
      const created = await api('POST', '/v1/runs', {
        agent: AGENT,
        input: message,
        run_id: `chat_${clientId}`,
      });
      return send(res, created.status, created.body);
    }
    const runId = parts[1] === undefined ? undefined : decodeURIComponent(parts[1]);
    if (parts[0] === 'chat' && runId !== undefined && ID.test(runId)) {
      const run = `/v1/runs/${encodeURIComponent(runId)}`;
      // POST /chat/:run/messages {message, client_message_id}: the customer's next message.
      if (req.method === 'POST' && parts[2] === 'messages') {
        const { message, client_message_id: clientId } = await readJson(req);
        const sent = await api('POST', `${run}/messages`, { client_message_id: clientId, content: message });
        return send(res, sent.status, sent.body);
      }
      // GET /chat/:run/events: the run's event stream, passed through as it comes.
      if (req.method === 'GET' && parts[2] === 'events') {
        const lastId = req.headers['last-event-id'];
        const after = url.searchParams.get('after');
        const query = after !== null && /^\d{1,15}$/.test(after) ? `?after=${after}` : '';
        const upstream = await fetch(`${API}${run}/events${query}`, {
          headers: {
            authorization: `Bearer ${KEY}`,
            ...(typeof lastId === 'string' ? { 'last-event-id': lastId } : {}),
          },
        });
        if (!upstream.ok || upstream.body === null) return send(res, upstream.status, await upstream.json());
        res.writeHead(200, {
          'content-type': 'text/event-stream; charset=utf-8',
          'cache-control': 'no-cache',
        });
        const body = Readable.fromWeb(upstream.body);
        req.on('close', () => body.destroy());
        body.on('error', () => res.end());
        body.pipe(res);
        return;
      }
      // GET /chat/:run: the run (status, usage), and the approvals it waits for.
      if (req.method === 'GET' && parts.length === 2) {
        const shown = await api('GET', run);
        if (shown.status !== 200) return send(res, shown.status, shown.body);
        const pending = await api('GET', '/v1/approvals?status=pending&limit=100', undefined, SUPERVISOR_KEY);
        const approvals = (pending.body.items ?? []).filter((a) => a.run_id === runId);
        return send(res, 200, { run: shown.body, approvals });
      }
    }
    // POST /approvals/:key/approve: the supervisor's side of the demo page.
    if (
      req.method === 'POST' &&
      parts[0] === 'approvals' &&
      parts[2] === 'approve' &&
      parts[1] !== undefined
    ) {
      const decided = await api(
        'POST',
        `/v1/approvals/${encodeURIComponent(decodeURIComponent(parts[1]))}/approve`,
        { reason: 'approved in the chat example' },
        SUPERVISOR_KEY,
      );
      return send(res, decided.status, decided.body);
    }
    send(res, 404, { error: 'not found' });
  } catch (error) {
    if (error instanceof BadRequest) return send(res, 400, { error: error.message });
    send(res, 502, { error: String(error instanceof Error ? error.message : error), id: randomUUID() });
  }
});

server.listen(Number(process.env.PORT ?? 3000), '127.0.0.1', () => {
  const { port } = server.address();
  console.log(`chat example on http://127.0.0.1:${port} (talking to ${API})`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
