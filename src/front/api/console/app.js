// bosun operator console: one page over bosun's HTTP API (/v1/...).
//
// No framework and no build step: the server embeds this file as is. Every
// value from the API is rendered through text nodes and attributes (never
// innerHTML), so a message type or an error text cannot inject markup.
//
// Sections (hash routes):
//   #/deliveries[/<correlationId>]   deliveries, a delivery's timeline, live over SSE
//   #/sagas[/<kind>/<key>]           sagas and their state
//   #/dead-letters[/<id>]            dead letters (list or grouped), detail, replay,
//                                    edit-and-replay, replay a group at a rate

const KEY_STORAGE = 'bosun.console.apiKey';
const SECTIONS = ['deliveries', 'sagas', 'dead-letters', 'consumers'];
const POLL_MS = 500;

// ---------------------------------------------------------------- helpers

/** Builds an element; string/number children become text nodes. */
function h(tag, attrs = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === 'class') element.className = value;
    else if (name.startsWith('on') && typeof value === 'function') element.addEventListener(name.slice(2), value);
    else if (value === true) element.setAttribute(name, '');
    else element.setAttribute(name, String(value));
  }
  append(element, children);
  return element;
}

function append(parent, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    parent.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

function clear(element) {
  element.replaceChildren();
  return element;
}

const $ = (id) => document.getElementById(id);

/** A class-name-safe version of a status word. */
const token = (text) => String(text ?? '').toLowerCase().replace(/[^a-z0-9-]/g, '');

function badge(status, testid) {
  return h('span', { class: `badge status-${token(status)}`, 'data-testid': testid, 'data-status': status ?? '' }, status ?? '—');
}

const pad = (value, width = 2) => String(value).padStart(width, '0');

/**
 * A time as the console shows every time, and as `bosun deliveries show`
 * prints it: to the millisecond, in UTC, saying so
 * (`2026-12-07 21:49:33.412 UTC`).
 */
function utcText(date) {
  const day = `${date.getUTCFullYear()}-${pad(date.getUTCMonth() + 1)}-${pad(date.getUTCDate())}`;
  const clock = `${pad(date.getUTCHours())}:${pad(date.getUTCMinutes())}:${pad(date.getUTCSeconds())}`;
  return `${day} ${clock}.${pad(date.getUTCMilliseconds(), 3)} UTC`;
}

/** The same time on this browser's clock, with its offset (`2026-12-07 22:49:33.412 +01:00`). */
function localText(date) {
  const offset = -date.getTimezoneOffset();
  const sign = offset < 0 ? '-' : '+';
  const zone = `${sign}${pad(Math.floor(Math.abs(offset) / 60))}:${pad(Math.abs(offset) % 60)}`;
  const day = `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}`;
  const clock = `${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
  return `${day} ${clock}.${pad(date.getMilliseconds(), 3)} ${zone}`;
}

/** A time from the API: shown in UTC to the millisecond; the exact value and the local time on hover. */
function time(iso) {
  if (!iso) return h('span', { class: 'muted' }, '—');
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return h('time', { datetime: iso, title: iso }, String(iso));
  return h('time', { datetime: iso, title: `${iso} (here: ${localText(date)})` }, utcText(date));
}

const text = (value) => (value === undefined || value === null || value === '' ? '—' : String(value));

function shortId(id) {
  const value = String(id ?? '');
  return value.length > 13 ? `${value.slice(0, 8)}…` : value;
}

function link(href, ...children) {
  return h('a', { href }, ...children);
}

function route(...parts) {
  return `#/${parts.map((part) => encodeURIComponent(part)).join('/')}`;
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => {
      clearTimeout(timer);
      resolve();
    });
  });
}

function pretty(value) {
  return JSON.stringify(value, null, 2);
}

// ---------------------------------------------------------------- pictures
// Drawn by the page itself as inline SVG (no library, nothing fetched).

const SVG_NS = 'http://www.w3.org/2000/svg';

/** Builds an SVG element; string/number children become text nodes. */
function svgNode(tag, attrs = {}, ...children) {
  const element = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    element.setAttribute(name, String(value));
  }
  append(element, children);
  return element;
}

const millis = (iso) => {
  const value = new Date(iso).getTime();
  return Number.isNaN(value) ? null : value;
};

/** An RFC 3339 time with its fraction to nine digits, so that two compare as text (`…29.4Z` before `…29.461Z`). */
const fineTime = (iso) => {
  const value = String(iso ?? '');
  return /\.\d+/.test(value) ? value.replace(/\.(\d+)/, (_, digits) => `.${digits.padEnd(9, '0')}`) : value.replace(/(:\d\d)(?=[Z+-])/, '$1.000000000');
};

/** Orders timeline lines by when they happened (not as text: fractions of a second vary in length). */
const byTime = (a, b) => (millis(a.at) ?? 0) - (millis(b.at) ?? 0) || fineTime(a.at).localeCompare(fineTime(b.at));

function duration(ms) {
  if (ms < 1) return '<1 ms';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  return `${(ms / 1000).toFixed(ms < 10000 ? 2 : 1)} s`;
}

/** The attempt a timeline line is about, counted from 1 as everywhere (`attemptNumber`; `attempt` + 1 from an older bosun). */
const attemptNumber = (event) => event.attemptNumber ?? (Number(event.attempt ?? 0) + 1);

/** What a consumer did with a message: its outcome lines in order. */
const OUTCOMES = new Set(['completed', 'retry-scheduled', 'dead-lettered', 'duplicate']);

/**
 * The hops of a delivery as waterfall rows: one per message and consumer,
 * each a list of segments from when the message was sent (or its last
 * retry was scheduled) to what the consumer did. A consumer the message is
 * routed to (`byConsumer`) that has not handled it yet is an open segment
 * up to now; a message no consumer receives is a mark where it was sent.
 */
function waterfallRows(delivery) {
  const rows = [];
  for (const message of delivery.messages ?? []) {
    const events = [...(message.events ?? [])].sort(byTime);
    const sent = events.find((event) => event.status === 'sent');
    const start = millis(sent?.at ?? message.firstSeen ?? events[0]?.at);
    if (start === null) continue;
    const routed = (message.byConsumer ?? []).map((hop) => hop.consumer);
    const consumers = [...new Set([...routed, ...events.filter((event) => event.consumer).map((event) => event.consumer)])];
    if (!consumers.length) {
      // Published: sent, and no consumer is routed to it (over, not waiting).
      rows.push({ message, consumer: null, segments: [{ from: start, to: start, status: 'published', attempt: null }] });
      continue;
    }
    for (const consumer of consumers) {
      let from = start;
      const segments = [];
      for (const event of events.filter((event) => event.consumer === consumer && OUTCOMES.has(event.status))) {
        const at = millis(event.at) ?? from;
        segments.push({ from, to: at, status: event.status, attempt: attemptNumber(event), detail: event.detail });
        from = at;
      }
      if (!segments.length || segments[segments.length - 1].status === 'retry-scheduled') {
        const last = segments[segments.length - 1];
        segments.push({ from, to: null, status: 'waiting', attempt: last ? last.attempt + 1 : 1 });
      }
      rows.push({ message, consumer, segments });
    }
  }
  return rows;
}

/** A delivery as a waterfall of its hops, `width` pixels wide. */
function drawWaterfall(delivery, width) {
  const rows = waterfallRows(delivery);
  const total = Math.max(480, Math.floor(width || 900));
  const labelWidth = Math.min(220, Math.floor(total * 0.4));
  const barWidth = total - labelWidth - 16;
  const rowHeight = 32;
  const top = 24;
  const now = Date.now();
  const times = rows.flatMap((row) => row.segments.flatMap((segment) => [segment.from, segment.to ?? now]));
  const t0 = Math.min(...times);
  const t1 = Math.max(t0 + 1, ...rows.flatMap((row) => row.segments.map((segment) => segment.to ?? segment.from)));
  const x = (t) => labelWidth + ((Math.min(t, t1) - t0) / (t1 - t0)) * barWidth;
  const height = top + rows.length * rowHeight + 6;
  const svg = svgNode('svg', {
    class: 'waterfall',
    'data-testid': 'waterfall-svg',
    viewBox: `0 0 ${total} ${height}`,
    width: total,
    height,
    role: 'img',
    'aria-label': `the delivery's ${rows.length} hops over ${duration(t1 - t0)}`,
  });
  for (let tick = 0; tick <= 4; tick += 1) {
    const at = labelWidth + (barWidth * tick) / 4;
    const anchor = tick === 0 ? 'start' : tick === 4 ? 'end' : 'middle';
    svg.append(
      svgNode('line', { class: 'wf-grid', x1: at, x2: at, y1: top - 6, y2: height - 4 }),
      svgNode('text', { class: 'wf-tick', x: at, y: 13, 'text-anchor': anchor }, duration(((t1 - t0) * tick) / 4)),
    );
  }
  // The hop that ended a failed delivery (its outcome's message): red, as a
  // dead letter is, even when no consumer receives it (ReleaseBlocked).
  const outcome = delivery.outcome ?? {};
  const endedBy = outcome.state === 'failed' ? outcome.messageId : null;
  rows.forEach((row, index) => {
    const y = top + index * rowHeight;
    const ended = endedBy !== null && endedBy !== undefined && row.message.messageId === endedBy &&
      (!outcome.consumer || !row.consumer || row.consumer === outcome.consumer);
    const failed = ended || row.segments.some((segment) => segment.status === 'dead-lettered');
    const retried = row.segments.some((segment) => segment.status === 'retry-scheduled');
    const label = row.consumer ? `${row.message.messageType} → ${row.consumer}` : `${row.message.messageType} (no consumer)`;
    const group = svgNode('g', {
      class: `wf-row${failed ? ' wf-failed' : ''}${retried ? ' wf-retried' : ''}${ended ? ' wf-ended' : ''}`,
      'data-testid': 'waterfall-row',
      'data-message-type': row.message.messageType ?? '',
      'data-message-id': row.message.messageId ?? '',
      'data-consumer': row.consumer ?? '',
      'data-ended': ended ? 'true' : null,
    });
    if (ended) {
      group.append(svgNode('rect', { class: 'wf-ended-band', x: 0, y: y + 1, width: total, height: rowHeight - 2, rx: 3 }));
    }
    const consumerText = row.consumer ?? (ended && outcome.consumer ? `from ${outcome.consumer}` : 'no consumer');
    group.append(
      svgNode('text', { class: 'wf-label', x: labelWidth - 8, y: y + 13, 'text-anchor': 'end' }, text(row.message.messageType)),
      svgNode('text', { class: 'wf-consumer', x: labelWidth - 8, y: y + 26, 'text-anchor': 'end' }, consumerText),
    );
    for (const segment of row.segments) {
      const left = x(segment.from);
      const right = segment.to === null ? x(now) : x(segment.to);
      const spent = (segment.to ?? now) - segment.from;
      const what =
        segment.status === 'waiting'
          ? `waiting for ${duration(spent)}`
          : segment.status === 'published'
            ? `published, no consumer receives it${ended ? '; it ended the delivery' : ''}`
            : `${segment.status} after ${duration(spent)}`;
      const attempt = segment.attempt === null ? '' : ` (attempt ${segment.attempt})`;
      group.append(
        svgNode(
          'rect',
          {
            class: `wf-bar wf-${token(segment.status)}${ended ? ' wf-ended-bar' : ''}`,
            'data-testid': 'waterfall-bar',
            'data-status': segment.status,
            x: left.toFixed(1),
            y: y + 7,
            width: Math.max(segment.status === 'published' && ended ? 8 : 3, right - left).toFixed(1),
            height: rowHeight - 14,
            rx: 2,
          },
          svgNode('title', {}, `${label}: ${what}${attempt}${segment.detail ? ` — ${segment.detail}` : ''}`),
        ),
      );
    }
    svg.append(group);
  });
  return svg;
}

/** Rows of a state machine: each state's distance from the initial one. */
function layers(machine) {
  const depth = new Map([[machine.initial, 0]]);
  const queue = [machine.initial];
  while (queue.length) {
    const state = queue.shift();
    for (const edge of machine.transitions) {
      if (edge.from === state && !depth.has(edge.to)) {
        depth.set(edge.to, depth.get(state) + 1);
        queue.push(edge.to);
      }
    }
  }
  let last = Math.max(0, ...depth.values());
  for (const state of machine.states) if (!depth.has(state.value)) depth.set(state.value, ++last);
  return depth;
}

/**
 * A saga's state machine, top to bottom from its initial state, with its
 * current state filled, the states its history went through outlined and
 * the transitions it took drawn bold with how often.
 */
function drawSagaDiagram(diagram) {
  const { machine } = diagram;
  const depth = layers(machine);
  const rows = new Map();
  for (const state of machine.states) {
    const row = depth.get(state.value);
    if (!rows.has(row)) rows.set(row, []);
    rows.get(row).push(state);
  }
  const boxWidth = 124;
  const boxHeight = 34;
  const gapX = 22;
  const gapY = 58;
  const left = 70;
  const right = 56;
  const top = 34;
  const widest = Math.max(...[...rows.values()].map((states) => states.length));
  const inner = widest * boxWidth + (widest - 1) * gapX;
  const width = left + inner + right;
  const height = top + rows.size * boxHeight + (rows.size - 1) * gapY + 30;
  const place = new Map();
  for (const [row, states] of rows) {
    const rowWidth = states.length * boxWidth + (states.length - 1) * gapX;
    states.forEach((state, index) => {
      place.set(state.value, {
        x: left + (inner - rowWidth) / 2 + index * (boxWidth + gapX),
        y: top + row * (boxHeight + gapY),
        row,
      });
    });
  }
  const taken = new Map((diagram.taken ?? []).map((entry) => [entry.transition, entry.count]));
  const visited = new Set(diagram.visited ?? []);
  const svg = svgNode('svg', {
    class: 'saga-diagram',
    'data-testid': 'saga-diagram-svg',
    viewBox: `0 0 ${width} ${height}`,
    width,
    height,
    role: 'img',
    'aria-label': `state machine of ${diagram.kind}/${diagram.key}, now ${diagram.current}`,
  });
  const marker = (id, cls) =>
    svgNode(
      'marker',
      {
        id,
        viewBox: '0 0 10 10',
        refX: 9,
        refY: 5,
        markerUnits: 'userSpaceOnUse',
        markerWidth: 9,
        markerHeight: 9,
        orient: 'auto-start-reverse',
      },
      svgNode('path', { d: 'M 0 0 L 10 5 L 0 10 z', class: cls }),
    );
  svg.append(svgNode('defs', {}, marker('sd-arrow', 'sd-arrow'), marker('sd-arrow-taken', 'sd-arrow-taken')));
  const edges = svgNode('g', { class: 'sd-edges' });
  let bends = 0;
  machine.transitions.forEach((edge, index) => {
    const from = place.get(edge.from);
    const to = place.get(edge.to);
    if (!from || !to) return;
    const count = taken.get(index) ?? 0;
    let d;
    let label;
    if (edge.from === edge.to) {
      // A loop on the right of the box.
      const x0 = from.x + boxWidth;
      d = `M ${x0} ${from.y + 8} C ${x0 + 36} ${from.y - 6}, ${x0 + 36} ${from.y + boxHeight + 6}, ${x0} ${from.y + boxHeight - 8}`;
      label = { x: x0 + 30, y: from.y - 2 };
    } else if (to.row > from.row) {
      // Down to a later row.
      const sx = from.x + boxWidth / 2;
      const sy = from.y + boxHeight;
      const ex = to.x + boxWidth / 2;
      const ey = to.y;
      d = `M ${sx} ${sy} C ${sx} ${sy + 30}, ${ex} ${ey - 30}, ${ex} ${ey}`;
      label = { x: (sx + ex) / 2 + 10, y: (sy + ey) / 2 };
    } else if (to.row === from.row) {
      // Along the row.
      const rightwards = to.x > from.x;
      const sx = rightwards ? from.x + boxWidth : from.x;
      const ex = rightwards ? to.x : to.x + boxWidth;
      const y = from.y + boxHeight / 2 + (rightwards ? -6 : 6);
      const lift = Math.abs(ex - sx) > gapX + 2 ? (rightwards ? -28 : 28) : 0;
      d = `M ${sx} ${y} C ${(sx * 2 + ex) / 3} ${y + lift}, ${(sx + ex * 2) / 3} ${y + lift}, ${ex} ${y}`;
      label = { x: (sx + ex) / 2, y: y + lift / 2 - 3 };
    } else {
      // Back up to an earlier row, bending out to one side.
      bends += 1;
      const side = bends % 2 ? -1 : 1;
      const bend = side * (46 + 8 * bends);
      const sx = from.x + boxWidth / 2 + side * 24;
      const sy = from.y;
      const ex = to.x + boxWidth / 2 + side * 24;
      const ey = to.y + boxHeight;
      d = `M ${sx} ${sy} C ${sx + bend} ${sy - 30}, ${ex + bend} ${ey + 30}, ${ex} ${ey}`;
      label = { x: (sx + ex) / 2 + bend * 0.7, y: (sy + ey) / 2 };
    }
    edges.append(
      svgNode(
        'path',
        {
          d,
          class: count ? 'sd-edge sd-taken' : 'sd-edge',
          'marker-end': count ? 'url(#sd-arrow-taken)' : 'url(#sd-arrow)',
          'data-testid': 'saga-transition',
          'data-from': edge.from,
          'data-to': edge.to,
          'data-taken': count,
        },
        svgNode('title', {}, `${edge.label}${count ? ` — taken ${count}×` : ''} (by ${edge.triggers.join(', ')})`),
      ),
    );
    if (count) {
      edges.append(svgNode('text', { class: 'sd-count', x: label.x, y: label.y, 'text-anchor': 'middle' }, `${count}×`));
    }
  });
  svg.append(edges);
  for (const state of machine.states) {
    const at = place.get(state.value);
    const current = state.value === diagram.current;
    const seen = visited.has(state.value);
    svg.append(
      svgNode(
        'g',
        {
          class: `sd-state${current ? ' sd-current' : ''}${seen ? ' sd-visited' : ''}${state.final ? ' sd-final' : ''}`,
          'data-testid': 'saga-state-node',
          'data-state': state.value,
          'data-current': current,
          'data-visited': seen,
        },
        svgNode('rect', { x: at.x, y: at.y, width: boxWidth, height: boxHeight, rx: state.final ? 17 : 6 }),
        svgNode('text', { x: at.x + boxWidth / 2, y: at.y + boxHeight / 2 + 4, 'text-anchor': 'middle' }, state.name),
        svgNode('title', {}, `${state.name}: ${state.description}${current ? ' (now)' : ''}`),
      ),
    );
  }
  // Where a saga starts.
  const first = place.get(machine.initial);
  if (first) {
    const cx = first.x + boxWidth / 2;
    svg.append(
      svgNode('circle', { class: 'sd-start', cx, cy: first.y - 22, r: 6 }),
      svgNode('line', { class: 'sd-edge', x1: cx, y1: first.y - 16, x2: cx, y2: first.y, 'marker-end': 'url(#sd-arrow)' }),
    );
  }
  return svg;
}

// ---------------------------------------------------------------- API

/** An error answer of the API: `{"error": {"code", "message", "field"?}}`. */
class ApiError extends Error {
  constructor(status, code, message, field = null) {
    super(message);
    this.status = status;
    this.code = code;
    this.field = field;
  }
}

function getKey() {
  try {
    return sessionStorage.getItem(KEY_STORAGE) ?? '';
  } catch {
    return '';
  }
}

function authHeaders() {
  const key = getKey();
  return key ? { Authorization: `Bearer ${key}` } : {};
}

async function errorFrom(response) {
  const body = await response.text().catch(() => '');
  let parsed = null;
  try {
    parsed = body ? JSON.parse(body) : null;
  } catch {
    parsed = null;
  }
  const error = parsed && typeof parsed === 'object' ? parsed.error : null;
  if (error && typeof error === 'object') {
    return new ApiError(
      response.status,
      String(error.code ?? `http-${response.status}`),
      String(error.message ?? response.statusText),
      error.field === undefined || error.field === null ? null : String(error.field),
    );
  }
  return new ApiError(response.status, `http-${response.status}`, body.slice(0, 300) || response.statusText);
}

async function api(path, { method = 'GET', body, signal } = {}) {
  const headers = { Accept: 'application/json', ...authHeaders() };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      signal,
      cache: 'no-store',
    });
  } catch (err) {
    if (err?.name === 'AbortError') throw err;
    throw new ApiError(0, 'network', `bosun did not answer: ${err?.message ?? err}`);
  }
  if (!response.ok) {
    const error = await errorFrom(response);
    if (error.status === 401) keyRefused(error);
    throw error;
  }
  const raw = await response.text();
  return raw ? JSON.parse(raw) : null;
}

function query(params) {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) {
    if (value !== undefined && value !== null && value !== '' && value !== false) search.set(name, String(value));
  }
  const encoded = search.toString();
  return encoded ? `?${encoded}` : '';
}

/** Shows an error (or clears the slot when `error` is null). */
function showError(slot, error) {
  clear(slot);
  if (!error) return;
  if (error?.name === 'AbortError') return;
  const apiError = error instanceof ApiError ? error : new ApiError(0, 'console', String(error?.message ?? error));
  const hint = {
    401: 'Enter a valid API key above.',
    403: 'This key does not have the scope this needs.',
  }[apiError.status];
  slot.append(
    h(
      'div',
      { class: 'error', role: 'alert', 'data-testid': 'error', 'data-code': apiError.code },
      h('strong', { class: 'error-code', 'data-testid': 'error-code' }, apiError.code),
      apiError.status ? h('span', { class: 'muted' }, ` (HTTP ${apiError.status})`) : null,
      ': ',
      h('span', { class: 'error-message', 'data-testid': 'error-message' }, apiError.message),
      apiError.field
        ? h(
            'div',
            { class: 'error-field', 'data-testid': 'error-field', 'data-field': apiError.field },
            'Field: ',
            h('code', {}, apiError.field),
          )
        : null,
      hint ? h('div', { class: 'muted' }, hint) : null,
    ),
  );
}

// ---------------------------------------------------------------- key

function keyLabel(key) {
  // bsn_<id>_<secret>: show the public id only.
  const match = /^(bsn_[^_]+)_/.exec(key);
  return match ? `${match[1]}_…` : 'a key';
}

function renderKeyState() {
  const key = getKey();
  const state = $('key-state');
  state.className = 'key-state';
  if (key) {
    state.textContent = `Using ${keyLabel(key)}`;
    state.dataset.state = 'set';
  } else {
    state.textContent = 'No key: enter an API key';
    state.dataset.state = 'none';
  }
}

function keyRefused(error) {
  const state = $('key-state');
  state.className = 'key-state refused';
  state.dataset.state = 'refused';
  state.textContent = `Key refused (${error.code})`;
}

function setupKey() {
  $('key-form').addEventListener('submit', (event) => {
    event.preventDefault();
    const key = $('api-key').value.trim();
    try {
      if (key) sessionStorage.setItem(KEY_STORAGE, key);
      else sessionStorage.removeItem(KEY_STORAGE);
    } catch {
      // Storage disabled: the key lasts until the page reloads.
    }
    $('api-key').value = '';
    renderKeyState();
    reload();
  });
  $('key-forget').addEventListener('click', () => {
    try {
      sessionStorage.removeItem(KEY_STORAGE);
    } catch {
      // nothing stored
    }
    $('api-key').value = '';
    renderKeyState();
    stopDeliveryStream();
  });
  renderKeyState();
}

// ---------------------------------------------------------------- routing

let currentSection = null;

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const parts = raw ? raw.split('/') : [];
  try {
    return parts.map((part) => decodeURIComponent(part));
  } catch {
    return [];
  }
}

function showSection(section) {
  for (const name of SECTIONS) {
    const selected = name === section;
    $(`section-${name}`).hidden = !selected;
    const tab = $(`tab-${name}`);
    tab.setAttribute('aria-selected', String(selected));
    tab.tabIndex = selected ? 0 : -1;
  }
}

async function onRoute({ force = false } = {}) {
  const parts = parseHash();
  const section = SECTIONS.includes(parts[0]) ? parts[0] : 'deliveries';
  const entered = force || section !== currentSection;
  currentSection = section;
  showSection(section);
  showError($('global-error'), null);
  if (!getKey()) {
    showError($('global-error'), new ApiError(0, 'no-key', 'Enter an API key to use the console.'));
    return;
  }
  if (section !== 'deliveries') stopDeliveryStream();
  if (section === 'deliveries') {
    if (entered) loadDeliveries();
    if (parts[1]) openDelivery(parts[1], { force });
    else closeDelivery();
  } else if (section === 'sagas') {
    if (entered) loadSagas();
    if (parts[1] && parts[2]) openSaga(parts[1], parts[2]);
    else closeSaga();
  } else if (section === 'consumers') {
    loadConsumers();
  } else {
    if (entered) loadDeadLetters();
    if (parts[1]) openDeadLetter(parts[1]);
    else closeDeadLetter();
  }
}

function reload() {
  onRoute({ force: true });
}

function setupTabs() {
  const tabs = SECTIONS.map((name) => $(`tab-${name}`));
  for (const [index, tab] of tabs.entries()) {
    tab.addEventListener('click', () => {
      location.hash = route(tab.dataset.section);
    });
    tab.addEventListener('keydown', (event) => {
      const step = { ArrowRight: 1, ArrowLeft: -1 }[event.key];
      if (!step) return;
      const next = tabs[(index + step + tabs.length) % tabs.length];
      next.focus();
      next.click();
    });
  }
}

// ---------------------------------------------------------------- deliveries

let selectedDelivery = null;
let deliveryStream = null; // AbortController of the live stream
let deliveryModel = null; // { id, delivery, live: Map }
let refreshTimer = null;

async function loadDeliveries() {
  const slot = $('deliveries-error');
  showError(slot, null);
  try {
    const data = await api(`/v1/deliveries${query({ limit: 50 })}`);
    renderDeliveries(data?.deliveries ?? []);
  } catch (err) {
    showError(slot, err);
  }
}

function renderDeliveries(deliveries) {
  const body = clear($('deliveries-body'));
  $('deliveries-empty').hidden = deliveries.length > 0;
  for (const delivery of deliveries) {
    const id = String(delivery.correlationId ?? '');
    body.append(
      h(
        'tr',
        {
          'data-testid': 'delivery-row',
          'data-correlation-id': id,
          'data-status': delivery.status ?? '',
          class: id === selectedDelivery ? 'selected' : '',
          'aria-current': id === selectedDelivery ? 'true' : null,
        },
        h('td', {}, time(delivery.startedAt)),
        h('td', {}, text(delivery.messageType)),
        h('td', {}, text(delivery.tenantId)),
        h('td', {}, badge(delivery.status, 'delivery-row-status')),
        h('td', {}, link(route('deliveries', id), h('code', { title: id }, id))),
      ),
    );
  }
}

function markSelected(tbodyId, attribute, value) {
  for (const row of $(tbodyId).querySelectorAll('tr')) {
    const selected = row.getAttribute(attribute) === value;
    row.classList.toggle('selected', selected);
    if (selected) row.setAttribute('aria-current', 'true');
    else row.removeAttribute('aria-current');
  }
}

function closeDelivery() {
  stopDeliveryStream();
  selectedDelivery = null;
  deliveryModel = null;
  $('delivery-detail').hidden = true;
  $('delivery-placeholder').hidden = false;
  markSelected('deliveries-body', 'data-correlation-id', null);
}

async function openDelivery(id, { force = false } = {}) {
  if (id === selectedDelivery && !force && deliveryStream) return;
  stopDeliveryStream();
  selectedDelivery = id;
  deliveryModel = { id, delivery: null, live: new Map() };
  markSelected('deliveries-body', 'data-correlation-id', id);
  $('delivery-placeholder').hidden = true;
  $('delivery-detail').hidden = false;
  $('delivery-id').textContent = id;
  clear($('delivery-status'));
  $('delivery-outcome').hidden = true;
  $('delivery-outcome-result').hidden = true;
  clear($('delivery-messages'));
  clear($('timeline-body'));
  showError($('delivery-error'), null);
  setLive('connecting');
  $('delivery-live').dataset.lines = '0';
  const loaded = await refreshDelivery(id);
  if (loaded && selectedDelivery === id) followDelivery(id);
}

async function refreshDelivery(id) {
  try {
    const delivery = await api(`/v1/deliveries/${encodeURIComponent(id)}`);
    if (!deliveryModel || deliveryModel.id !== id) return false;
    deliveryModel.delivery = delivery;
    renderDelivery();
    return true;
  } catch (err) {
    if (selectedDelivery === id) {
      showError($('delivery-error'), err);
      setLive('stopped');
    }
    return false;
  }
}

/** Re-reads the delivery at most every 400 ms while lines stream in. */
function scheduleDeliveryRefresh(id) {
  if (refreshTimer) return;
  refreshTimer = setTimeout(() => {
    refreshTimer = null;
    refreshDelivery(id);
  }, 400);
}

const eventKey = (e) => [e.messageId, e.consumer ?? '', e.status, e.attempt, e.at, e.detail ?? ''].join('|');

function renderDelivery() {
  const { delivery, live } = deliveryModel;
  if (!delivery) return;
  const status = $('delivery-status');
  status.className = `badge status-${token(delivery.status)}`;
  status.dataset.status = delivery.status ?? '';
  status.textContent = text(delivery.status);
  renderOutcome(delivery);
  // The trace id, to look the delivery up in the tracing backend.
  $('delivery-trace').textContent = delivery.traceId ?? '';
  $('delivery-trace-line').hidden = !delivery.traceId;

  const waterfall = $('delivery-waterfall');
  clear(waterfall).append(drawWaterfall(delivery, waterfall.clientWidth));

  const messages = clear($('delivery-messages'));
  const endedBy = delivery.outcome?.state === 'failed' ? delivery.outcome.messageId : null;
  const events = new Map();
  for (const message of delivery.messages ?? []) {
    messages.append(
      h(
        'article',
        {
          class: `message${endedBy && message.messageId === endedBy ? ' ended' : ''}`,
          'data-testid': 'delivery-message',
          'data-message-type': message.messageType ?? '',
          'data-status': message.status ?? '',
        },
        h(
          'header',
          {},
          h('strong', {}, text(message.messageType)),
          ' ',
          badge(message.status, 'delivery-message-status'),
          h('span', { class: 'muted' }, ` attempts ${text(message.attempts)}`),
        ),
        message.summary ? h('p', { class: 'summary' }, message.summary) : null,
        h(
          'p',
          { class: 'muted small' },
          'message ',
          h('code', { title: message.messageId ?? '' }, shortId(message.messageId)),
          (message.consumers ?? []).length ? ` · consumers: ${message.consumers.join(', ')}` : '',
          ' · last update ',
          time(message.lastUpdate),
        ),
      ),
    );
    for (const event of message.events ?? []) events.set(eventKey(event), event);
  }
  for (const [key, event] of live) if (!events.has(key)) events.set(key, event);
  const ordered = [...events.values()].sort(byTime);

  const body = clear($('timeline-body'));
  for (const event of ordered) {
    body.append(
      h(
        'tr',
        { 'data-testid': 'timeline-event', 'data-status': event.status ?? '', 'data-message-type': event.messageType ?? '' },
        h('td', {}, time(event.at)),
        h('td', {}, text(event.messageType)),
        h('td', {}, text(event.consumer)),
        h('td', {}, badge(event.status, 'timeline-event-status')),
        h('td', { 'data-testid': 'timeline-event-attempt' }, text(attemptNumber(event))),
        h('td', { class: 'detail' }, text(event.detail)),
      ),
    );
  }
}

/**
 * The delivery's outcome first, as a banner: red when it failed, amber when
 * a hop is failing and retried, green when it completed; its sentence (what
 * ended it and where, what to do next) and its next actions: replay the
 * dead letter here, open the dead letter or the release saga.
 */
function renderOutcome(delivery) {
  const outcome = delivery.outcome;
  const banner = $('delivery-outcome');
  banner.hidden = !outcome;
  if (!outcome) return;
  const state = outcome.state ?? delivery.status ?? '';
  banner.className = `outcome outcome-${token(state)}`;
  banner.dataset.state = state;
  banner.dataset.cause = outcome.cause ?? '';
  banner.setAttribute('role', state === 'failed' ? 'alert' : 'status');
  $('delivery-outcome-sentence').textContent = text(outcome.sentence);
  const actions = clear($('delivery-outcome-actions'));
  for (const action of outcome.actions ?? []) {
    const attrs = {
      'data-testid': 'outcome-action',
      'data-kind': action.kind ?? '',
      'data-target': action.target ?? '',
      title: `${action.method} ${action.path} · ${action.command}`,
    };
    if (action.kind === 'replay-dead-letter') {
      actions.append(h('button', { ...attrs, type: 'button', onclick: (event) => replayFromOutcome(event.currentTarget, action) }, text(action.label)));
    } else if (action.kind === 'open-dead-letter') {
      actions.append(h('a', { ...attrs, class: 'button-link', href: route('dead-letters', action.target ?? '') }, text(action.label)));
    } else if (action.kind === 'open-release') {
      actions.append(h('a', { ...attrs, class: 'button-link', href: route('sagas', 'release', action.target ?? '') }, text(action.label)));
    }
  }
  actions.hidden = !actions.childElementCount;
}

/** Replays the dead letter the outcome names, then reads the delivery again. */
async function replayFromOutcome(button, action) {
  const id = deliveryModel?.id;
  const result = $('delivery-outcome-result');
  button.disabled = true;
  result.hidden = true;
  showError($('delivery-error'), null);
  try {
    const replay = await api(action.path, { method: action.method || 'POST' });
    result.textContent = `Replayed to ${text(replay?.destination)} by ${text(replay?.by)}.`;
    result.hidden = false;
    if (id && deliveryModel?.id === id) {
      // In progress again: follow it live anew.
      stopDeliveryStream();
      if ((await refreshDelivery(id)) && selectedDelivery === id) followDelivery(id);
      loadDeliveries();
    }
  } catch (err) {
    showError($('delivery-error'), err);
  } finally {
    button.disabled = false;
  }
}

function setLive(state, status) {
  const live = $('delivery-live');
  live.dataset.state = state;
  live.className = `live live-${token(state)}`;
  live.textContent = {
    connecting: 'connecting…',
    live: '● live',
    reconnecting: 'reconnecting…',
    ended: `stream ended: ${status ?? ''}`,
    stopped: 'not live',
    disconnected: 'live updates lost (refresh to retry)',
  }[state] ?? state;
}

function stopDeliveryStream() {
  if (deliveryStream) deliveryStream.abort();
  deliveryStream = null;
  if (refreshTimer) clearTimeout(refreshTimer);
  refreshTimer = null;
}

/**
 * Follows /v1/deliveries/{id}/events with fetch (EventSource cannot send the
 * Authorization header), reconnecting with backoff until `event: end`.
 */
async function followDelivery(id) {
  const controller = new AbortController();
  deliveryStream = controller;
  const { signal } = controller;
  let failures = 0;
  while (!signal.aborted) {
    setLive(failures ? 'reconnecting' : 'connecting');
    try {
      const response = await fetch(`/v1/deliveries/${encodeURIComponent(id)}/events`, {
        headers: { Accept: 'text/event-stream', ...authHeaders() },
        signal,
        cache: 'no-store',
      });
      if (!response.ok) throw await errorFrom(response);
      if (!response.body) throw new ApiError(0, 'console', 'this browser cannot stream responses');
      setLive('live');
      failures = 0;
      const ended = await readEvents(response.body, signal, (name, data) => onDeliveryEvent(id, name, data));
      if (ended || signal.aborted) return;
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof ApiError && err.status >= 400 && err.status < 500) {
        if (err.status === 401) keyRefused(err);
        showError($('delivery-error'), err);
        setLive('stopped');
        return;
      }
      failures += 1;
      if (failures > 5) {
        showError($('delivery-error'), err);
        setLive('disconnected');
        return;
      }
    }
    await sleep(Math.min(500 * 2 ** failures, 8000), signal);
  }
}

/** Returns true when the delivery's stream is over. */
function onDeliveryEvent(id, name, data) {
  if (!deliveryModel || deliveryModel.id !== id) return true;
  let parsed = null;
  try {
    parsed = data ? JSON.parse(data) : null;
  } catch {
    parsed = null;
  }
  if (name === 'timeline' && parsed && typeof parsed === 'object') {
    deliveryModel.live.set(eventKey(parsed), parsed);
    const live = $('delivery-live');
    live.dataset.lines = String(Number(live.dataset.lines ?? 0) + 1);
    renderDelivery();
    scheduleDeliveryRefresh(id);
    return false;
  }
  if (name === 'end') {
    setLive('ended', parsed?.status);
    refreshDelivery(id);
    loadDeliveries();
    return true;
  }
  if (name === 'error') {
    // The server gave up on the stream (the error in the API's shape).
    const error = parsed?.error ?? {};
    showError(
      $('delivery-error'),
      new ApiError(0, String(error.code ?? 'stream-error'), String(error.message ?? data), error.field ?? null),
    );
    setLive('stopped');
    return true;
  }
  return false;
}

/** Reads a text/event-stream body; calls `onEvent(name, data)` per event. */
async function readEvents(body, signal, onEvent) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  let name = '';
  let data = [];
  const abort = () => reader.cancel().catch(() => {});
  signal.addEventListener('abort', abort, { once: true });
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return false;
      buffer += decoder.decode(value, { stream: true });
      for (;;) {
        const end = buffer.search(/\r\n|\r|\n/);
        if (end < 0 || (buffer[end] === '\r' && end === buffer.length - 1)) break;
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + (buffer.startsWith('\r\n', end) ? 2 : 1));
        if (line === '') {
          if (data.length || name) {
            if (onEvent(name || 'message', data.join('\n'))) {
              abort();
              return true;
            }
          }
          name = '';
          data = [];
          continue;
        }
        if (line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        let value = colon < 0 ? '' : line.slice(colon + 1);
        if (value.startsWith(' ')) value = value.slice(1);
        if (field === 'event') name = value;
        else if (field === 'data') data.push(value);
      }
    }
  } finally {
    signal.removeEventListener('abort', abort);
  }
}

// ---------------------------------------------------------------- sagas

let selectedSaga = null;

async function loadSagas() {
  const slot = $('sagas-error');
  showError(slot, null);
  try {
    const data = await api(`/v1/sagas${query({ kind: $('saga-kind').value })}`);
    renderSagas(data?.sagas ?? []);
  } catch (err) {
    showError(slot, err);
  }
}

function renderSagas(sagas) {
  const body = clear($('sagas-body'));
  $('sagas-empty').hidden = sagas.length > 0;
  for (const saga of sagas) {
    const id = `${saga.kind}/${saga.key}`;
    body.append(
      h(
        'tr',
        { 'data-testid': 'saga-row', 'data-saga': id, 'data-kind': saga.kind ?? '', 'data-key': saga.key ?? '' },
        h('td', {}, text(saga.kind)),
        h('td', {}, link(route('sagas', saga.kind ?? '', saga.key ?? ''), text(saga.key))),
        h('td', {}, text(saga.version)),
        h('td', {}, text(saga.tenantId)),
        h('td', {}, time(saga.updatedAt)),
      ),
    );
  }
  markSelected('sagas-body', 'data-saga', selectedSaga);
}

function closeSaga() {
  selectedSaga = null;
  $('saga-detail').hidden = true;
  $('saga-placeholder').hidden = false;
  markSelected('sagas-body', 'data-saga', null);
}

async function openSaga(kind, key) {
  selectedSaga = `${kind}/${key}`;
  markSelected('sagas-body', 'data-saga', selectedSaga);
  showError($('sagas-error'), null);
  try {
    const saga = await api(`/v1/sagas/${encodeURIComponent(kind)}/${encodeURIComponent(key)}`);
    if (selectedSaga !== `${kind}/${key}`) return;
    $('saga-placeholder').hidden = true;
    $('saga-detail').hidden = false;
    $('saga-title').textContent = `${saga.kind}/${saga.key} v${saga.version}`;
    $('saga-state').textContent = pretty(saga.state);
    $('release-panel').hidden = saga.kind !== 'release';
    if (saga.kind === 'release') renderRelease(saga, () => selectedSaga === `${kind}/${key}`);
    const picture = clear($('saga-diagram'));
    try {
      const diagram = await api(`/v1/sagas/${encodeURIComponent(kind)}/${encodeURIComponent(key)}/diagram`);
      if (selectedSaga !== `${kind}/${key}`) return;
      picture.append(drawSagaDiagram(diagram));
      $('saga-diagram-note').textContent = diagram.pathFound
        ? `Now ${diagram.current}. Highlighted: the states it has been in and the transitions its ${saga.history?.length ?? 0} saves took (read from each save's message type).`
        : `Now ${diagram.current}; its history does not follow the drawn transitions.`;
    } catch (err) {
      showError($('sagas-error'), err);
    }
    const body = clear($('saga-history-body'));
    for (const entry of saga.history ?? []) {
      body.append(
        h(
          'tr',
          { 'data-testid': 'saga-history-row' },
          h('td', {}, text(entry.version)),
          h('td', {}, h('code', { title: entry.messageId ?? '' }, shortId(entry.messageId))),
          h('td', {}, text(entry.messageType)),
          h('td', {}, time(entry.at)),
        ),
      );
    }
  } catch (err) {
    showError($('sagas-error'), err);
  }
}

// ---------------------------------------------------------------- releases

/** Where one environment of a release is, read from the release's state. */
function environmentStatus(state, environment) {
  if ((state.deployed ?? []).includes(environment)) return 'deployed';
  const emitted = state.emitted ?? [];
  if (emitted.includes(`DeploymentPromoted/${environment}`)) return 'syncing';
  if (state.windowWait?.environment === environment) return 'waiting-window';
  if (emitted.includes(`ReleaseApproved/${environment}`)) return 'approved';
  if (state.waitingFor?.environment === environment) return 'awaiting-approval';
  if (state.phase === 'rejected') return 'rejected';
  return 'pending';
}

/** The release manager's view of a release saga: what it waits for, each
 * environment, and every decision taken on it (its audit log). */
function renderRelease(saga, stillShown) {
  const state = saga.state ?? {};
  const summary = clear($('release-summary'));
  summary.append(
    h('p', {}, badge(state.phase, 'release-phase'), ' ', text(state.releaseId),
      state.currentEnvironment ? ` — now ${state.currentEnvironment}` : ''),
  );
  const waiting = state.waitingFor;
  if (waiting) {
    const given = (waiting.required ?? 1) - (waiting.stillNeeded ?? 0);
    summary.append(
      h('p', { 'data-testid': 'release-waiting-approval' },
        `Waiting for approval of ${waiting.environment}: ${given} of ${waiting.required} given, ${waiting.stillNeeded} more needed`,
        waiting.approverGroups?.length ? ` (groups ${waiting.approverGroups.join(', ')})` : '',
        waiting.excluded?.length ? `; may not approve: ${waiting.excluded.join(', ')}` : ''),
    );
  }
  const wait = state.windowWait;
  if (wait) {
    summary.append(
      h('p', { 'data-testid': 'release-waiting-window' },
        `Promotion to ${wait.environment} waits (${wait.rule}): ${wait.reason} — `,
        wait.until ? h('span', {}, 'until ', time(wait.until)) : h('span', {}, 'no end known; looking again at ', time(wait.checkAt))),
    );
  }
  if (state.refusedApprovals?.length) {
    summary.append(
      h('p', { 'data-testid': 'release-refusals' },
        `${state.refusedApprovals.length} approval(s) refused; last: ${state.refusedApprovals.at(-1).approver} by rule ${state.refusedApprovals.at(-1).rule}`),
    );
  }
  renderVerification(state);
  closeRollback();
  const [tenant] = releaseKey(saga.key);
  const body = clear($('release-environments-body'));
  const environments = [];
  for (const planned of state.plan?.environments ?? []) {
    const environment = planned.environment;
    environments.push(environment);
    const approval = state.approvals?.[environment];
    const approvers = approval?.approvers?.length ? approval.approvers.join(', ') : approval?.approver;
    const overriding = state.overrides?.[environment];
    body.append(
      h('tr', { 'data-testid': 'release-environment', 'data-environment': environment },
        h('td', {}, environment),
        h('td', {}, badge(environmentStatus(state, environment), 'release-environment-status')),
        h('td', {}, text(approvers)),
        h('td', {}, overriding ? `${overriding.by}: ${overriding.reason}` : '—'),
        h('td', { 'data-testid': 'release-environment-requires' }, h('span', { class: 'muted' }, '…')),
        h('td', { 'data-testid': 'release-environment-current' }, h('span', { class: 'muted' }, '…')),
        h('td', { 'data-testid': 'release-environment-verified' }, h('span', { class: 'muted' }, '…')),
        h('td', {},
          h('button', {
            type: 'button',
            class: 'danger small',
            'data-testid': 'rollback-open',
            onclick: () => openRollback(tenant, environment, state.build?.moduleId ?? state.plan?.moduleId),
          }, 'Roll back'))),
    );
  }
  loadReleaseEnvironments(tenant, environments, state.build?.moduleId ?? state.plan?.moduleId, stillShown);
  loadReleaseGraph(tenant, state, environments, stillShown);
  loadReleaseAudit(saga.key, stillShown);
}

/** A release saga's key as tenant and release id (`tenant/release`). */
function releaseKey(key) {
  const slash = key.indexOf('/');
  return slash > 0 ? [key.slice(0, slash), key.slice(slash + 1)] : ['default', key];
}

/** The verification of a release: the run in progress (samples, failures,
 * soak, the last outcome of each check), where it was verified, and a failed
 * verification with what became of the rollback. */
function renderVerification(state) {
  const slot = clear($('release-verification'));
  const run = state.verifying;
  if (run) {
    slot.append(
      h('p', { 'data-testid': 'release-verifying', 'data-environment': run.environment },
        `Verifying ${run.environment}: ${run.samples} sample(s), ${run.failures} failed; soak until `,
        time(run.soakUntil), '; next sample at ', time(run.checkAt)),
    );
    if (run.last?.length) {
      slot.append(
        h('ul', { class: 'checks', 'data-testid': 'release-verifying-checks' },
          run.last.map((outcome) =>
            h('li', { 'data-testid': 'release-check', 'data-check': outcome.check, 'data-passed': String(outcome.passed) },
              badge(outcome.passed ? 'passed' : 'failed', 'release-check-status'), ' ', h('code', {}, outcome.check),
              outcome.detail ? ` — ${outcome.detail}` : ''))),
      );
    }
  }
  const verified = Object.entries(state.verified ?? {});
  if (verified.length) {
    slot.append(
      h('p', { 'data-testid': 'release-verified' }, 'Verified in ',
        verified.map(([environment, record], index) => [
          index ? ', ' : '',
          h('span', { 'data-testid': 'release-verified-environment', 'data-environment': environment, title: record.summary ?? '' },
            environment, ' (', time(record.at), ')'),
        ])),
    );
  }
  const failure = state.verificationFailed;
  if (failure) {
    const rollback = failure.rollBack === false
      ? 'the policy does not roll back: the environment keeps this release'
      : failure.rollbackRequested
        ? `rollback to the last verified release asked for (see the gitops saga of ${failure.environment})`
        : 'rollback waits for the promotion gate (a window or hold), or an override';
    slot.append(
      h('p', { class: 'verification-failed', 'data-testid': 'release-verification-failed', 'data-environment': failure.environment },
        h('strong', {}, `Verification failed in ${failure.environment}`), ' at ', time(failure.at), `: ${failure.reason}. `,
        h('span', { 'data-testid': 'release-rollback-outcome' }, rollback)),
    );
  }
}

/** Each environment of a release: the release its module runs and the last
 * one verified there (`GET /v1/tenants/{tenant}/environments/{environment}`). */
async function loadReleaseEnvironments(tenant, environments, moduleId, stillShown) {
  showError($('release-environments-error'), null);
  for (const environment of environments) {
    let view = null;
    try {
      view = await api(`/v1/tenants/${encodeURIComponent(tenant)}/environments/${encodeURIComponent(environment)}`);
    } catch (err) {
      if (!stillShown()) return;
      // Nothing promoted there yet reads as not found.
      if (err?.status !== 404) showError($('release-environments-error'), err);
    }
    if (!stillShown()) return;
    const row = document.querySelector(`#release-environments-body tr[data-environment="${CSS.escape(environment)}"]`);
    if (!row) continue;
    const modules = view?.modules ?? [];
    const module = modules.find((candidate) => candidate.moduleId === moduleId) ?? (modules.length === 1 ? modules[0] : null);
    const current = module?.current;
    const verified = module?.verified?.[0];
    const currentCell = clear(row.querySelector('[data-testid="release-environment-current"]'));
    currentCell.dataset.release = current?.releaseId ?? '';
    currentCell.append(current ? h('code', { title: `promoted ${current.promotedAt}` }, current.releaseId) : '—');
    const verifiedCell = clear(row.querySelector('[data-testid="release-environment-verified"]'));
    verifiedCell.dataset.release = verified?.releaseId ?? '';
    verifiedCell.append(verified ? [h('code', {}, verified.releaseId), ' ', time(verified.verifiedAt)] : '—');
  }
}

/** The promotion graph: for each environment of a release, the environments
 * the tenant's policy requires it to have been verified in first
 * (`verification.<env>.requiresVerifiedIn`), each marked with whether this
 * release was. */
async function loadReleaseGraph(tenant, state, environments, stillShown) {
  let policy = null;
  try {
    const record = await api(`/v1/tenants/${encodeURIComponent(tenant)}/release-policy`);
    policy = record?.document ?? null;
  } catch (err) {
    if (!stillShown()) return;
    // No policy stored reads as not found: nothing is required.
    if (err?.status !== 404) showError($('release-environments-error'), err);
  }
  if (!stillShown()) return;
  for (const environment of environments) {
    const row = document.querySelector(`#release-environments-body tr[data-environment="${CSS.escape(environment)}"]`);
    if (!row) continue;
    const required = policy?.verification?.[environment]?.requiresVerifiedIn ?? [];
    const cell = clear(row.querySelector('[data-testid="release-environment-requires"]'));
    cell.dataset.requires = required.join(',');
    if (!required.length) {
      cell.append('—');
      continue;
    }
    required.forEach((upstream, index) => {
      const done = Boolean(state.verified?.[upstream]);
      cell.append(
        index ? ', ' : '',
        h('span', { 'data-testid': 'release-requirement', 'data-environment': upstream, 'data-met': String(done) },
          `${done ? '✓' : '✗'} ${upstream}`),
      );
    });
  }
}

let rollbackTarget = null; // { tenant, environment, moduleId }

function openRollback(tenant, environment, moduleId) {
  rollbackTarget = { tenant, environment, moduleId };
  $('rollback-environment').textContent = environment;
  $('rollback-reason').value = '';
  $('rollback-override').value = '';
  showError($('rollback-error'), null);
  $('rollback-result').hidden = true;
  $('rollback-form').hidden = false;
  $('rollback-reason').focus();
}

function closeRollback() {
  rollbackTarget = null;
  $('rollback-form').hidden = true;
  showError($('rollback-error'), null);
}

/** Sends the rollback; a refusal (no verified release to go back to, a
 * closed window, a missing right) is shown as bosun says it. */
async function submitRollback(event) {
  event.preventDefault();
  if (!rollbackTarget) return;
  const { tenant, environment, moduleId } = rollbackTarget;
  const body = { reason: $('rollback-reason').value.trim() };
  const overriding = $('rollback-override').value.trim();
  if (overriding) body.overrideReason = overriding;
  if (moduleId) body.moduleId = moduleId;
  showError($('rollback-error'), null);
  $('rollback-result').hidden = true;
  try {
    const accepted = await api(
      `/v1/tenants/${encodeURIComponent(tenant)}/environments/${encodeURIComponent(environment)}/rollback`,
      { method: 'POST', body },
    );
    const plan = accepted.plan ?? {};
    const result = clear($('rollback-result'));
    result.append(
      `Rollback of ${plan.moduleId} in ${plan.environment} sent: ${plan.fromReleaseId ?? 'nothing'} → ${plan.toReleaseId} (verified `,
      time(plan.verifiedAt), '). ',
      link(route('deliveries', accepted.correlationId), 'Follow its delivery'),
    );
    result.hidden = false;
  } catch (err) {
    showError($('rollback-error'), err);
  }
}

async function loadReleaseAudit(key, stillShown) {
  const [tenant, releaseId] = releaseKey(key);
  const body = clear($('release-audit-body'));
  showError($('release-audit-error'), null);
  try {
    const entries = await api(`/v1/tenants/${encodeURIComponent(tenant)}/audit${query({ releaseId, limit: 1000 })}`);
    if (!stillShown()) return;
    for (const entry of entries ?? []) {
      body.append(
        h('tr', { 'data-testid': 'release-audit-row', 'data-action': entry.action },
          h('td', {}, time(entry.at)),
          h('td', {}, entry.action, entry.detail?.rule ? ` (${entry.detail.rule})` : ''),
          h('td', {}, text(entry.environment)),
          h('td', {}, text(entry.by)),
          h('td', {}, text(entry.door)),
          h('td', {}, text(entry.reason))),
      );
    }
  } catch (err) {
    showError($('release-audit-error'), err);
  }
}

function setupSagas() {
  $('sagas-refresh').addEventListener('click', loadSagas);
  $('saga-kind').addEventListener('change', loadSagas);
  $('rollback-form').addEventListener('submit', submitRollback);
  $('rollback-cancel').addEventListener('click', closeRollback);
}

// ---------------------------------------------------------------- dead letters

let selectedDeadLetter = null;
let deadLetterDetail = null;
let bulkGroup = null;
let bulkPoll = null; // AbortController of the progress polling

function deadLetterFilters() {
  return {
    consumer: $('dl-consumer').value.trim(),
    type: $('dl-type').value.trim(),
    reason: $('dl-reason').value.trim(),
    includeReplayed: $('dl-include-replayed').checked ? 'true' : '',
  };
}

function groupFilters() {
  return {
    ...deadLetterFilters(),
    includeAcknowledged: $('dl-include-acknowledged').checked ? 'true' : '',
  };
}

const groupedView = () => $('dl-view-groups').checked;

async function loadDeadLetters() {
  const slot = $('dl-error');
  showError(slot, null);
  const grouped = groupedView();
  $('dl-list').hidden = grouped;
  $('dl-groups').hidden = !grouped;
  try {
    if (grouped) {
      const data = await api(`/v1/dead-letters/groups${query(groupFilters())}`);
      renderGroups(data?.groups ?? []);
    } else {
      const data = await api(`/v1/dead-letters${query({ ...deadLetterFilters(), limit: 200 })}`);
      renderDeadLetters(data?.deadLetters ?? []);
    }
  } catch (err) {
    showError(slot, err);
  }
}

function renderDeadLetters(records) {
  const body = clear($('dl-body'));
  $('dl-empty').hidden = records.length > 0;
  for (const record of records) {
    const id = String(record.id ?? '');
    body.append(
      h(
        'tr',
        {
          'data-testid': 'dead-letter-row',
          'data-id': id,
          'data-reason': record.reason ?? '',
          'data-status': record.status ?? '',
        },
        h('td', {}, link(route('dead-letters', id), time(record.deadLetteredAt))),
        h('td', {}, text(record.consumer)),
        h('td', {}, text(record.messageType)),
        h('td', {}, text(record.reason)),
        h('td', {}, badge(record.status, 'dead-letter-status')),
        h('td', { class: 'detail', title: record.description ?? '' }, text(record.description)),
      ),
    );
  }
  markSelected('dl-body', 'data-id', selectedDeadLetter);
}

/** Counts as an inline SVG sparkline: one bar per bucket, oldest first. */
function sparkline(counts, label) {
  const NS = 'http://www.w3.org/2000/svg';
  const values = Array.isArray(counts) ? counts.map((n) => Number(n) || 0) : [];
  const most = Math.max(1, ...values);
  const width = Math.max(1, values.length) * 4;
  const svg = document.createElementNS(NS, 'svg');
  svg.setAttribute('viewBox', `0 0 ${width} 16`);
  svg.setAttribute('width', String(width));
  svg.setAttribute('height', '16');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', label);
  svg.setAttribute('class', 'sparkline');
  svg.setAttribute('data-testid', 'group-trend');
  values.forEach((count, index) => {
    const bar = document.createElementNS(NS, 'rect');
    const height = count === 0 ? 1 : Math.max(2, Math.round((count / most) * 16));
    bar.setAttribute('x', String(index * 4));
    bar.setAttribute('y', String(16 - height));
    bar.setAttribute('width', '3');
    bar.setAttribute('height', String(height));
    bar.setAttribute('class', count === 0 ? 'none' : 'some');
    svg.append(bar);
  });
  return svg;
}

async function acknowledgeGroup(group, slot) {
  const note = window.prompt('Acknowledge this group: it is hidden until a newer failure of its cause arrives. Note (optional):', group.acknowledgement?.note ?? '');
  if (note === null) return;
  try {
    await api(`/v1/dead-letters/groups/${encodeURIComponent(group.fingerprint)}/acknowledgement`, {
      method: 'PUT',
      body: note.trim() ? { note: note.trim() } : {},
    });
    loadDeadLetters();
  } catch (err) {
    showError(slot, err);
  }
}

async function unacknowledgeGroup(group, slot) {
  try {
    await api(`/v1/dead-letters/groups/${encodeURIComponent(group.fingerprint)}/acknowledgement`, { method: 'DELETE' });
    loadDeadLetters();
  } catch (err) {
    showError(slot, err);
  }
}

async function purgeGroup(group) {
  if (!window.confirm(`Purge all ${group.count} dead letters of this group? Their messages are deleted for good.`)) return;
  try {
    await api(`/v1/dead-letters/groups/${encodeURIComponent(group.fingerprint)}`, { method: 'DELETE' });
    loadDeadLetters();
  } catch (err) {
    showError($('dl-edit-error'), err);
  }
}

function renderGroups(groups) {
  const body = clear($('dl-groups-body'));
  $('dl-groups-empty').hidden = groups.length > 0;
  for (const group of groups) {
    body.append(
      h(
        'tr',
        {
          'data-testid': 'dead-letter-group',
          'data-reason': group.reason ?? '',
          'data-consumer': group.consumer ?? '',
          'data-type': group.messageType ?? '',
          'data-count': group.count ?? 0,
          'data-fingerprint': group.fingerprint ?? '',
        },
        h('td', { 'data-testid': 'group-count' }, text(group.count)),
        h('td', {}, text(group.reason)),
        h('td', {}, text(group.consumer)),
        h('td', {}, text(group.messageType)),
        h('td', {}, h('div', {}, time(group.firstAt)), h('div', { class: 'muted' }, 'to ', time(group.lastAt))),
        h(
          'td',
          { class: 'detail', title: group.description ?? '' },
          h('div', { 'data-testid': 'group-pattern' }, text(group.pattern ?? group.description)),
          group.acknowledgement
            ? h(
                'div',
                { class: 'muted', 'data-testid': 'group-acknowledgement' },
                'acknowledged ',
                time(group.acknowledgement.at),
                ` by ${group.acknowledgement.by}`,
                group.acknowledgement.note ? `: ${group.acknowledgement.note}` : '',
              )
            : '',
          h('div', { class: 'muted' }, 'last 24 h ', sparkline(group.trend?.counts, `dead letters per hour over the last day: ${(group.trend?.counts ?? []).join(', ')}`)),
        ),
        h(
          'td',
          {},
          h(
            'div',
            { class: 'row-actions' },
            h(
              'button',
              { type: 'button', class: 'secondary', 'data-testid': 'group-show', onclick: () => showGroup(group) },
              'Show',
            ),
            h(
              'button',
              { type: 'button', 'data-testid': 'group-replay', onclick: () => openBulk(group) },
              'Replay group…',
            ),
            h(
              'button',
              { type: 'button', class: 'secondary', 'data-testid': 'group-acknowledge', onclick: (event) => acknowledgeGroup(group, rowError(event)) },
              'Acknowledge…',
            ),
            group.acknowledgement
              ? h(
                  'button',
                  { type: 'button', class: 'secondary', 'data-testid': 'group-unacknowledge', onclick: (event) => unacknowledgeGroup(group, rowError(event)) },
                  'Unacknowledge',
                )
              : '',
            h(
              'button',
              { type: 'button', class: 'danger', 'data-testid': 'group-purge', onclick: () => purgeGroup(group) },
              'Purge group…',
            ),
          ),
          h('div', { class: 'error-slot', 'data-testid': 'group-error', 'aria-live': 'polite' }),
        ),
      ),
    );
  }
}

// The error slot of the row a click came from: errors show where the click was.
function rowError(event) {
  return event.target.closest('td').querySelector('.error-slot');
}

function showGroup(group) {
  $('dl-consumer').value = group.consumer ?? '';
  $('dl-type').value = group.messageType ?? '';
  $('dl-reason').value = group.reason ?? '';
  $('dl-view-list').checked = true;
  loadDeadLetters();
}

function closeDeadLetter() {
  selectedDeadLetter = null;
  deadLetterDetail = null;
  $('dl-detail').hidden = true;
  $('dl-placeholder').hidden = !$('bulk-replay').hidden;
  markSelected('dl-body', 'data-id', null);
}

async function openDeadLetter(id, { keepMessages = false } = {}) {
  selectedDeadLetter = id;
  markSelected('dl-body', 'data-id', id);
  if (!keepMessages) {
    clear($('dl-replay-result'));
    showError($('dl-edit-error'), null);
  }
  try {
    const record = await api(`/v1/dead-letters/${encodeURIComponent(id)}`);
    if (selectedDeadLetter !== id) return;
    deadLetterDetail = record;
    renderDeadLetter(record, { keepPayload: keepMessages });
  } catch (err) {
    showError($('dl-error'), err);
  }
}

function renderDeadLetter(record, { keepPayload }) {
  $('dl-placeholder').hidden = true;
  $('dl-detail').hidden = false;
  $('dl-detail-id').textContent = record.id ?? '';
  const status = $('dl-detail-status');
  status.className = `badge status-${token(record.status)}`;
  status.dataset.status = record.status ?? '';
  status.textContent = text(record.status);

  const fields = clear($('dl-detail-fields'));
  const row = (label, value) => [h('dt', {}, label), h('dd', {}, value)];
  append(fields, [
    row('Consumer', text(record.consumer)),
    row('Entity', text(record.entity)),
    row('Message type', text(record.messageType)),
    row('Message id', h('code', {}, text(record.messageId))),
    row(
      'Delivery',
      record.correlationId
        ? link(route('deliveries', record.correlationId), h('code', {}, record.correlationId))
        : '—',
    ),
    row('Tenant', text(record.tenantId)),
    row('Trace', h('code', { 'data-testid': 'dl-detail-trace' }, text(record.traceId))),
    row('Reason', h('span', { 'data-testid': 'dl-detail-reason' }, text(record.reason))),
    row('Description', h('span', { class: 'detail' }, text(record.description))),
    row('Dead-lettered', time(record.deadLetteredAt)),
    row('Origin', text(record.origin)),
  ]);

  const chain = clear($('dl-detail-chain'));
  for (const line of record.errorChain ?? []) chain.append(h('li', {}, line));

  const attempts = clear($('dl-detail-attempts-body'));
  for (const attempt of record.attempts ?? []) {
    attempts.append(
      h(
        'tr',
        {},
        h('td', {}, text(attempt.attempt)),
        h('td', {}, time(attempt.at)),
        h('td', { class: 'detail' }, (attempt.errorChain ?? []).join(': ')),
      ),
    );
  }

  const replays = clear($('dl-detail-replays'));
  for (const replay of record.replays ?? []) {
    replays.append(
      h(
        'li',
        { 'data-testid': 'dl-detail-replay' },
        time(replay.at),
        ` by ${text(replay.by)} to ${text(replay.destination)} `,
        h('code', { class: 'muted', title: replay.replayId ?? '' }, shortId(replay.replayId)),
        replay.edit ? ' (payload edited)' : '',
        replay.edit
          ? h(
              'ul',
              { 'data-testid': 'dl-detail-replay-diff' },
              (replay.edit.diff ?? []).length
                ? replay.edit.diff.map((change) =>
                    h(
                      'li',
                      { 'data-path': change.path ?? '' },
                      h('code', {}, text(change.path)),
                      ': ',
                      h('del', {}, change.before === undefined ? '(none)' : JSON.stringify(change.before)),
                      ' → ',
                      h('ins', {}, change.after === undefined ? '(none)' : JSON.stringify(change.after)),
                    ),
                  )
                : h('li', { class: 'muted' }, 'nothing changed'),
            )
          : null,
      ),
    );
  }
  if (!(record.replays ?? []).length) replays.append(h('li', { class: 'muted' }, 'Not replayed yet.'));

  const envelope = $('dl-detail-envelope');
  if (record.envelope !== undefined && record.envelope !== null) envelope.textContent = pretty(record.envelope);
  else envelope.textContent = record.bodyText ?? '(no body)';

  const payload = record.envelope && typeof record.envelope === 'object' ? record.envelope.payload : undefined;
  const textarea = $('dl-edit-payload');
  const editable = payload !== undefined;
  textarea.disabled = !editable;
  $('dl-replay-edited').disabled = !editable;
  if (!keepPayload || !textarea.value) {
    textarea.value = editable ? pretty(payload) : '';
    textarea.removeAttribute('aria-invalid');
  }
  textarea.placeholder = editable ? '' : 'The original envelope could not be read: only a plain replay is possible.';
}

function replayResult(result) {
  const slot = clear($('dl-replay-result'));
  slot.append(
    h(
      'p',
      { class: 'ok', 'data-testid': 'replay-ok', 'data-replay-id': result?.replayId ?? '' },
      result?.edited ? 'Replayed with the edited payload' : 'Replayed',
      ` to ${text(result?.destination)} by ${text(result?.by)} `,
      h('code', { title: result?.replayId ?? '' }, shortId(result?.replayId)),
    ),
  );
}

async function replayOne() {
  const id = selectedDeadLetter;
  if (!id) return;
  const button = $('dl-replay');
  button.disabled = true;
  clear($('dl-replay-result'));
  showError($('dl-edit-error'), null);
  try {
    const result = await api(`/v1/dead-letters/${encodeURIComponent(id)}/replay`, { method: 'POST' });
    replayResult(result);
    await openDeadLetter(id, { keepMessages: true });
    loadDeadLetters();
  } catch (err) {
    showError($('dl-edit-error'), err);
  } finally {
    button.disabled = false;
  }
}

async function replayEdited(event) {
  event.preventDefault();
  const id = selectedDeadLetter;
  if (!id) return;
  const textarea = $('dl-edit-payload');
  const slot = $('dl-edit-error');
  clear($('dl-replay-result'));
  showError(slot, null);
  textarea.removeAttribute('aria-invalid');
  let payload;
  try {
    payload = JSON.parse(textarea.value);
  } catch (err) {
    textarea.setAttribute('aria-invalid', 'true');
    showError(slot, new ApiError(0, 'malformed-json', `The payload is not JSON: ${err.message}`, 'payload'));
    return;
  }
  const button = $('dl-replay-edited');
  button.disabled = true;
  try {
    const result = await api(`/v1/dead-letters/${encodeURIComponent(id)}/replay`, {
      method: 'POST',
      body: { payload },
    });
    replayResult(result);
    await openDeadLetter(id, { keepMessages: true });
    loadDeadLetters();
  } catch (err) {
    if (err instanceof ApiError && err.field) textarea.setAttribute('aria-invalid', 'true');
    showError(slot, err);
  } finally {
    button.disabled = false;
  }
}

async function purgeOne() {
  const id = selectedDeadLetter;
  if (!id) return;
  if (!window.confirm(`Purge dead letter ${id}? Its message is deleted for good.`)) return;
  try {
    await api(`/v1/dead-letters/${encodeURIComponent(id)}`, { method: 'DELETE' });
    location.hash = route('dead-letters');
    loadDeadLetters();
  } catch (err) {
    showError($('dl-edit-error'), err);
  }
}

// Replay a group at a rate, with progress.

function openBulk(group) {
  stopBulkPoll();
  bulkGroup = group;
  $('bulk-replay').hidden = false;
  $('dl-placeholder').hidden = true;
  $('bulk-summary').textContent =
    `${group.count ?? (group.ids ?? []).length} dead letter(s): ${text(group.reason)} · ` +
    `${text(group.consumer)} · ${text(group.messageType)}`;
  $('bulk-progress-area').hidden = true;
  $('bulk-start').disabled = false;
  showError($('bulk-error'), null);
  $('bulk-rate').focus();
}

function closeBulk() {
  stopBulkPoll();
  bulkGroup = null;
  $('bulk-replay').hidden = true;
  $('dl-placeholder').hidden = !$('dl-detail').hidden;
}

function stopBulkPoll() {
  if (bulkPoll) bulkPoll.abort();
  bulkPoll = null;
}

function renderProgress(job) {
  $('bulk-progress-area').hidden = false;
  const total = Number(job.total ?? 0);
  const done = Number(job.done ?? 0);
  const progress = $('bulk-progress');
  progress.max = total > 0 ? total : 1;
  progress.value = total > 0 ? Math.min(done, total) : job.status === 'finished' ? 1 : 0;
  progress.dataset.state = job.status ?? '';
  progress.setAttribute('aria-valuetext', `${done} of ${total}`);
  $('bulk-progress-text').textContent = `${done} of ${total}`;
  const status = $('bulk-status');
  status.className = `badge status-${token(job.status)}`;
  status.dataset.status = job.status ?? '';
  status.textContent = text(job.status);
  $('bulk-id').textContent = job.id ?? '';
  const failed = clear($('bulk-failed'));
  for (const failure of job.failed ?? []) {
    failed.append(
      h('li', { 'data-testid': 'bulk-failure' }, h('code', {}, text(failure.id)), `: ${text(failure.error)}`),
    );
  }
  // Pause, resume and cancel: the job is stored, so any replica's console
  // controls it; each control is recorded with the key that used it.
  $('bulk-pause').hidden = job.status !== 'running';
  $('bulk-resume').hidden = job.status !== 'paused';
  $('bulk-cancel').hidden = !(job.status === 'running' || job.status === 'paused');
  $('bulk-controls-log').textContent = (job.controls ?? [])
    .map((control) => `${text(control.action)} by ${text(control.by)} at ${text(control.at)}`)
    .join(' · ');
  if (job.status === 'finished' || job.status === 'cancelled') {
    const replayed = (job.replayed ?? []).length;
    $('bulk-progress-text').textContent =
      `${done} of ${total} · ${replayed} replayed` + ((job.failed ?? []).length ? `, ${job.failed.length} failed` : '');
  }
}

async function startBulk(event) {
  event.preventDefault();
  if (!bulkGroup) return;
  const slot = $('bulk-error');
  showError(slot, null);
  const rateText = $('bulk-rate').value.trim();
  const rate = rateText === '' ? null : Number(rateText);
  if (rate !== null && !(Number.isFinite(rate) && rate > 0)) {
    showError(slot, new ApiError(0, 'invalid-field', 'The rate must be a number above 0 (per second).', 'rate'));
    return;
  }
  const ids = bulkGroup.ids ?? [];
  const body = ids.length
    ? { ids }
    : { filter: { consumer: bulkGroup.consumer, type: bulkGroup.messageType, reason: bulkGroup.reason } };
  if (rate !== null) body.rate = rate;
  const button = $('bulk-start');
  button.disabled = true;
  try {
    const job = await api('/v1/dead-letters/replays', { method: 'POST', body });
    renderProgress(job);
    await pollBulk(job);
  } catch (err) {
    showError(slot, err);
  } finally {
    button.disabled = false;
  }
}

async function pollBulk(job) {
  stopBulkPoll();
  const controller = new AbortController();
  bulkPoll = controller;
  let current = job;
  while (current.status !== 'finished' && current.status !== 'cancelled' && !controller.signal.aborted) {
    await sleep(POLL_MS, controller.signal);
    if (controller.signal.aborted) return;
    try {
      current = await api(`/v1/replays/${encodeURIComponent(job.id)}`, { signal: controller.signal });
      renderProgress(current);
    } catch (err) {
      if (controller.signal.aborted) return;
      showError($('bulk-error'), err);
      if (err instanceof ApiError && err.status >= 400 && err.status < 500) return;
    }
  }
  if (bulkPoll === controller) bulkPoll = null;
  loadDeadLetters();
  if (selectedDeadLetter) openDeadLetter(selectedDeadLetter, { keepMessages: true });
}

/** Pauses, resumes or cancels the job shown in the bulk replay panel. */
async function controlBulk(action) {
  const id = $('bulk-id').textContent;
  if (!id) return;
  const slot = $('bulk-error');
  showError(slot, null);
  try {
    const job = await api(`/v1/replays/${encodeURIComponent(id)}/${action}`, { method: 'POST' });
    renderProgress(job);
    if (action === 'resume' && !bulkPoll) pollBulk(job);
  } catch (err) {
    showError(slot, err);
  }
}

function setupDeadLetters() {
  for (const action of ['pause', 'resume', 'cancel']) {
    $(`bulk-${action}`).addEventListener('click', () => controlBulk(action));
  }
  $('dl-filters').addEventListener('submit', (event) => {
    event.preventDefault();
    loadDeadLetters();
  });
  $('dl-clear').addEventListener('click', () => {
    for (const id of ['dl-consumer', 'dl-type', 'dl-reason']) $(id).value = '';
    $('dl-include-replayed').checked = false;
    loadDeadLetters();
  });
  $('dl-include-replayed').addEventListener('change', loadDeadLetters);
  $('dl-include-acknowledged').addEventListener('change', loadDeadLetters);
  $('dl-view-list').addEventListener('change', loadDeadLetters);
  $('dl-view-groups').addEventListener('change', loadDeadLetters);
  $('dl-replay').addEventListener('click', replayOne);
  $('dl-purge').addEventListener('click', purgeOne);
  $('dl-edit-form').addEventListener('submit', replayEdited);
  $('bulk-form').addEventListener('submit', startBulk);
  $('bulk-close').addEventListener('click', closeBulk);
}

// ---------------------------------------------------------------- start

// ---------------------------------------------------------------- consumers

async function loadConsumers() {
  const slot = $('consumers-error');
  showError(slot, null);
  try {
    renderConsumers((await api('/v1/consumers')) ?? []);
  } catch (err) {
    showError(slot, err);
  }
}

async function controlConsumer(consumer, action, slot) {
  let reason = '';
  if (action === 'pause') {
    reason = window.prompt(`Pause ${consumer.name} for every tenant: its messages wait until it is resumed. Why?`, '');
    if (reason === null) return;
  }
  try {
    await api(`/v1/consumers/${encodeURIComponent(consumer.name)}/${action}`, {
      method: 'POST',
      body: reason.trim() ? { reason: reason.trim() } : {},
    });
    loadConsumers();
  } catch (err) {
    showError(slot, err);
  }
}

function renderConsumers(consumers) {
  const body = clear($('consumers-body'));
  for (const consumer of consumers) {
    const last = consumer.lastControl;
    const slot = h('div', { class: 'error-slot', 'data-testid': 'consumer-error', 'aria-live': 'polite' });
    body.append(
      h(
        'tr',
        { 'data-testid': 'consumer-row', 'data-consumer': consumer.name, 'data-paused': String(consumer.paused) },
        h('td', {}, consumer.name),
        h('td', {}, badge(consumer.paused ? 'paused' : 'receiving', 'consumer-state')),
        h(
          'td',
          { class: 'detail' },
          consumer.paused && last
            ? h('span', {}, time(last.at), ` by ${last.by}`, last.reason ? `: ${last.reason}` : '')
            : '',
        ),
        h(
          'td',
          {},
          h(
            'button',
            {
              type: 'button',
              class: consumer.paused ? '' : 'secondary',
              'data-testid': consumer.paused ? 'consumer-resume' : 'consumer-pause',
              onclick: () => controlConsumer(consumer, consumer.paused ? 'resume' : 'pause', slot),
            },
            consumer.paused ? 'Resume' : 'Pause…',
          ),
          slot,
        ),
      ),
    );
  }
}

function start() {
  setupKey();
  setupTabs();
  setupSagas();
  setupDeadLetters();
  $('deliveries-refresh').addEventListener('click', loadDeliveries);
  window.addEventListener('hashchange', () => onRoute());
  document.body.dataset.ready = 'true';
  onRoute({ force: true });
}

start();
