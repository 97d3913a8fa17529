// The chat page: sends the customer's messages, and reads the run's event stream — streamed deltas
// (`model.delta`, not durable) shown as they come, replaced by each step's durable `model.response`.
const log = document.getElementById('log');
const form = document.getElementById('composer');
const input = document.getElementById('message');
const sendButton = document.getElementById('send');
const statusLine = document.getElementById('status');
const usageLine = document.getElementById('usage');
const approvals = document.getElementById('approvals');

let runId;
let lastId = 0;
let source;
const DURABLE = [
  'run.created',
  'run.claimed',
  'run.message',
  'model.response',
  'tool.settled',
  'tool.unknown',
  'approval.requested',
  'approval.decided',
  'run.status',
];
const TOOL_WORDS = { lookup_order: 'Looking the order up…', issue_refund: 'Refund requested…' };

const newId = () =>
  (crypto.randomUUID ? crypto.randomUUID() : `${Date.now()}-${Math.random()}`).replace(
    /[^A-Za-z0-9_.-]/g,
    '',
  );

function say(role, text, attrs = {}) {
  const item = document.createElement('li');
  item.className = role;
  item.textContent = text;
  for (const [k, v] of Object.entries(attrs)) item.setAttribute(k, v);
  log.append(item);
  return item;
}

/** The bubble of a step's answer, made when its stream (or its durable response) first shows up. */
function bubble(step) {
  return (
    log.querySelector(`li.assistant[data-step="${step}"]`) ??
    say('assistant', '', { 'data-step': String(step) })
  );
}

function busy(on, text = '') {
  sendButton.disabled = on;
  input.disabled = on;
  statusLine.textContent = text;
}

async function refresh() {
  if (runId === undefined) return;
  const got = await (await fetch(`/chat/${runId}`)).json();
  const run = got.run;
  const budget = run.token_budget === null ? '' : ` of a budget of ${run.token_budget}`;
  usageLine.textContent = `Tokens so far: ${run.usage.total_tokens}${budget} (turn ${run.turn}).`;
  approvals.replaceChildren(
    ...got.approvals.map((a) => {
      const item = document.createElement('li');
      const what = document.createElement('p');
      what.textContent = `${a.tool_name}: ${JSON.stringify(a.args)}`;
      const approve = document.createElement('button');
      approve.type = 'button';
      approve.textContent = `Approve ${a.tool_name}`;
      approve.addEventListener('click', async () => {
        approve.disabled = true;
        const answer = await fetch(`/approvals/${encodeURIComponent(a.idempotency_key)}/approve`, {
          method: 'POST',
        });
        if (!answer.ok) {
          const body = await answer.json();
          statusLine.textContent = `The approval was not taken: ${body.error?.message ?? answer.status}`;
        }
        await refresh();
      });
      item.append(what, approve);
      return item;
    }),
  );
}

function follow() {
  source?.close();
  source = new EventSource(`/chat/${runId}/events?after=${lastId}`);
  for (const type of DURABLE) {
    source.addEventListener(type, (e) => {
      lastId = Math.max(lastId, Number(e.lastEventId) || 0);
      durable(type, JSON.parse(e.data).data);
    });
  }
  source.addEventListener('model.delta', (e) => {
    const d = JSON.parse(e.data);
    const item = bubble(d.step);
    if (d.type === 'start') {
      if (d.restarted) say('note', 'The assistant was interrupted and is answering again.');
      item.textContent = '';
      item.dataset.streaming = 'true';
    } else if (d.type === 'text') item.textContent += d.text;
    else if (d.type === 'tool-call-start')
      statusLine.textContent = TOOL_WORDS[d.toolName] ?? `Calling ${d.toolName}…`;
  });
}

function durable(type, data) {
  if (type === 'model.response') {
    const item = bubble(data.step);
    item.textContent = data.text;
    item.dataset.streaming = 'false';
    if (item.textContent === '') item.remove();
  } else if (type === 'approval.requested') {
    busy(true, 'Waiting for a supervisor to approve the refund…');
    void refresh();
  } else if (type === 'approval.decided') {
    statusLine.textContent = `The supervisor ${data.decision}; Penny carries on…`;
    void refresh();
  } else if (type === 'tool.settled') {
    say('call', `${data.toolName}: ${data.heard}`);
  } else if (type === 'run.status') {
    if (data.status === 'completed' || data.status === 'failed' || data.status === 'cancelled') {
      source?.close();
      busy(false, data.status === 'completed' ? '' : `The conversation ${data.status}: ${data.reason ?? ''}`);
      void refresh();
    }
  }
}

form.addEventListener('submit', async (event) => {
  event.preventDefault();
  const text = input.value.trim();
  if (text === '') return;
  busy(true, 'Sending…');
  const clientMessageId = newId();
  const answer =
    runId === undefined
      ? await fetch('/chat', {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ message: text, client_message_id: clientMessageId }),
        })
      : await fetch(`/chat/${runId}/messages`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ message: text, client_message_id: clientMessageId }),
        });
  const body = await answer.json();
  if (!answer.ok) {
    busy(false, body.error?.message ?? 'The message was not taken.');
    return;
  }
  runId ??= body.run_id;
  say('user', text);
  input.value = '';
  statusLine.textContent = 'Penny is answering…';
  follow();
});
