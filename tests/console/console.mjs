// The operator console in a real browser: Debian's Chromium driven by
// playwright-core against a running `bosun serve --http`.
//
//   NODE_PATH="$(scripts/browser node-path)" \
//   BOSUN_URL=http://127.0.0.1:PORT BOSUN_KEY=bsn_... \
//   BOSUN_DELIVERY=<correlation id> BOSUN_DEAD_LETTER_GROUP_REASON=<reason> \
//   node tests/console/console.mjs
//
// Env:
//   BOSUN_URL                        where bosun serves HTTP
//   BOSUN_KEY                        an admin key of the tenant that owns what follows
//   BOSUN_DELIVERY                   a correlation id that exists
//   BOSUN_DEAD_LETTER_GROUP_REASON   a dead-letter reason with at least two dead letters
//                                    (not replayed yet), all of one consumer and type
//   BOSUN_DEMO_DELIVERY              a whole delivery that completed (`bosun demo --data-dir`), with its
//                                    release saga: drawn as a waterfall and a state machine
//   BOSUN_FAILED_DELIVERY            optional: a delivery whose release a failing unit test stopped
//                                    (`bosun demo --failing-test`), of another tenant than BOSUN_KEY's
//   BOSUN_FAILED_KEY                 with BOSUN_FAILED_DELIVERY: a key of its tenant
//   BOSUN_PLATFORM_KEY               a platform key with consumers:pause (controls.mjs)
//   BOSUN_PICTURES_DIR               optional: where the pictures' screenshots go, and the failed
//                                    delivery page's (delivery-failed.png) (default: not kept)
//   BOSUN_LIVE_PROBE                 optional: `1` to also send a Probe that takes 3 s (the probe
//                                    consumer must run) and follow it live until it completes
//   BOSUN_SCREENSHOT                 optional: a PNG path for a screenshot (taken on failure too)
//   BOSUN_CHROMIUM                   optional: the browser (default /usr/bin/chromium)
//   BOSUN_STEP_TIMEOUT_MS            optional: how long one step may wait (default 30000)
//
// Prints one line per step that passed; exits 1 with the reason on the first
// failure. The group replay changes the data: run it on a fresh data directory.

import { controlSteps } from './controls.mjs';
import { createRequire } from 'node:module';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { decodePng, pixelsOf } from './png.mjs';

const require = createRequire(import.meta.url);

function fail(message) {
  console.error(`console test: ${message}`);
  process.exit(1);
}

function env(name) {
  const value = process.env[name];
  if (!value) fail(`${name} is not set (see the comment at the top of tests/console/console.mjs)`);
  return value;
}

const baseUrl = env('BOSUN_URL').replace(/\/+$/, '');
const key = env('BOSUN_KEY');
const deliveryId = env('BOSUN_DELIVERY');
const reason = env('BOSUN_DEAD_LETTER_GROUP_REASON');
const demoDelivery = env('BOSUN_DEMO_DELIVERY');
const failedDelivery = process.env.BOSUN_FAILED_DELIVERY || '';
const failedKey = failedDelivery ? env('BOSUN_FAILED_KEY') : '';
const picturesDir = process.env.BOSUN_PICTURES_DIR || '';
const liveProbe = process.env.BOSUN_LIVE_PROBE === '1';
const screenshotPath = process.env.BOSUN_SCREENSHOT || '';
const executablePath = process.env.BOSUN_CHROMIUM || '/usr/bin/chromium';
const timeout = Number(process.env.BOSUN_STEP_TIMEOUT_MS || 30000);

let chromium;
try {
  ({ chromium } = require('playwright-core'));
} catch (err) {
  fail(
    `cannot load playwright-core (${err.code ?? err.message}); ` +
      'run with NODE_PATH="$(scripts/browser node-path)"',
  );
}

// chromium.launch starts with a fresh, temporary profile (user data dir) and
// removes it on close; the flags keep Chromium from calling home.
const browser = await chromium
  .launch({
    executablePath,
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  })
  .catch((err) => fail(`cannot start ${executablePath}: ${err.message}`));
const context = await browser.newContext({ viewport: { width: 1400, height: 1000 } });
const page = await context.newPage();
page.setDefaultTimeout(timeout);
const pageErrors = [];
const consoleLines = [];
page.on('pageerror', (err) => pageErrors.push(err.message));
// Everything the page asks for must come from bosun itself.
const outside = [];
page.on('request', (request) => {
  const url = request.url();
  if (!url.startsWith(`${baseUrl}/`) && !url.startsWith('data:') && !url.startsWith('about:')) outside.push(url);
});
page.on('console', (message) => {
  consoleLines.push(`${message.type()}: ${message.text()}`);
  if (consoleLines.length > 50) consoleLines.shift();
});

const started = Date.now();
let passed = 0;

async function shutdown() {
  await browser.close().catch(() => {});
}

async function screenshot() {
  if (!screenshotPath) return;
  await page.screenshot({ path: screenshotPath, fullPage: true }).catch((err) => {
    console.error(`console test: screenshot to ${screenshotPath} failed: ${err.message}`);
  });
}

async function step(name, body) {
  const at = Date.now();
  try {
    await body();
    if (pageErrors.length) throw new Error(`uncaught error in the page: ${pageErrors.join(' | ')}`);
  } catch (err) {
    console.error(`not ok ${passed + 1} - ${name}\n  ${String(err.message ?? err).split('\n').join('\n  ')}`);
    if (consoleLines.length) console.error(`  browser console (last lines):\n    ${consoleLines.join('\n    ')}`);
    console.error(`  page: ${page.url()}`);
    await screenshot();
    if (screenshotPath) console.error(`  screenshot: ${screenshotPath}`);
    await shutdown();
    process.exit(1);
  }
  passed += 1;
  console.log(`ok ${passed} - ${name} (${Date.now() - at} ms)`);
}

function check(condition, message) {
  if (!condition) throw new Error(message);
}

const byTestId = (id) => `[data-testid="${id}"]`;
const cssString = (value) => JSON.stringify(String(value));

/** Waits until `predicate` (run in the page) returns truthy; its value. */
async function waitInPage(what, predicate, arg) {
  try {
    const handle = await page.waitForFunction(predicate, arg, { timeout, polling: 100 });
    return await handle.jsonValue();
  } catch (err) {
    const errors = await page
      .$$eval('[data-testid="error"]', (nodes) => nodes.map((node) => node.textContent.trim()))
      .catch(() => []);
    const shown = errors.length ? `; errors on the page: ${errors.join(' | ')}` : '';
    throw new Error(`timed out waiting until ${what}${shown}`);
  }
}

/** A screenshot of one element, kept under BOSUN_PICTURES_DIR when set, decoded. */
async function pictureOf(selector, name) {
  const buffer = await page.locator(selector).screenshot();
  const dir = picturesDir || mkdtempSync(join(tmpdir(), 'bosun-console-'));
  const path = join(dir, `${name}.png`);
  writeFileSync(path, buffer);
  const png = decodePng(buffer);
  console.log(`  ${name}: ${png.width}x${png.height} screenshot at ${path}`);
  return png;
}

/** A CSS custom property of the page (the console's colours). */
async function cssColour(name) {
  return (await page.evaluate((n) => getComputedStyle(document.documentElement).getPropertyValue(n), name)).trim();
}

// ---------------------------------------------------------------- steps

await step('GET / redirects to the console page', async () => {
  const response = await page.goto(`${baseUrl}/`);
  check(response, 'no response');
  check(response.ok(), `GET / ended with HTTP ${response.status()}`);
  check(new URL(page.url()).pathname === '/console', `GET / ended at ${page.url()}, not /console`);
  await page.waitForSelector('body[data-ready="true"]');
  check((await page.title()).includes('bosun'), `the title is ${await page.title()}`);
});

await step('without a key the page asks for one', async () => {
  await page.waitForSelector(`${byTestId('global-error')} [data-code="no-key"]`);
  check((await page.getAttribute(byTestId('key-state'), 'data-state')) === 'none', 'the key state is not "none"');
});

await step('the key is taken and kept in sessionStorage', async () => {
  await page.getByLabel('API key', { exact: true }).fill(key);
  await page.click(byTestId('key-save'));
  await page.waitForSelector(`${byTestId('key-state')}[data-state="set"]`);
  const stored = await page.evaluate(() => Object.values(sessionStorage));
  check(stored.includes(key), 'the key is not in sessionStorage');
  check((await page.inputValue('#api-key')) === '', 'the key field still shows the key');
});

const deliveryRow = `${byTestId('delivery-row')}[data-correlation-id=${cssString(deliveryId)}]`;

await step(`the delivery ${deliveryId} is listed`, async () => {
  await page.waitForSelector(deliveryRow);
});

await step('its timeline shows and follows the live stream', async () => {
  await page.click(`${deliveryRow} a`);
  await page.waitForSelector(`${byTestId('delivery-detail')}:visible`);
  const shownId = (await page.textContent(byTestId('delivery-id'))).trim();
  check(shownId === deliveryId, `the detail shows ${shownId}`);
  const events = await waitInPage(
    'the timeline has lines',
    () => document.querySelectorAll('[data-testid="timeline-event"]').length,
  );
  const messages = await page.locator(byTestId('delivery-message')).count();
  check(messages >= 1, 'no message is shown for the delivery');
  // The delivery's trace id, to jump to the trace in the tracing backend.
  const trace = (await page.locator(byTestId('delivery-trace')).textContent()) ?? '';
  check(/^[0-9a-f]{32}$/.test(trace), `the delivery's trace id is shown (got "${trace}")`);
  // The stream sends every line so far, then `end` once the delivery is over.
  const live = await waitInPage('the live stream sent the timeline', () => {
    const node = document.querySelector('[data-testid="delivery-live"]');
    const status = document.querySelector('[data-testid="delivery-status"]').dataset.status;
    const lines = Number(node.dataset.lines);
    const over = status === 'completed' || status === 'failed';
    const state = node.dataset.state;
    return lines >= 1 && (over ? state === 'ended' : state === 'live' || state === 'ended') ? { state, lines } : null;
  });
  const status = await page.getAttribute(byTestId('delivery-status'), 'data-status');
  console.log(
    `  ${events} timeline line(s), ${messages} message(s), status ${status}, stream ${live.state} after ${live.lines} line(s)`,
  );
});

if (liveProbe) {
  await step('a probe sent now is followed live until it completes', async () => {
    // Sent from here, so the page opens the delivery while the probe
    // consumer still works on it (3 s of simulated work).
    const response = await fetch(`${baseUrl}/v1/commands/Probe`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ group: 'console-test', workMs: 3000 }),
    });
    const accepted = await response.json();
    check(response.status === 202, `POST /v1/commands/Probe: ${response.status} ${JSON.stringify(accepted)}`);
    const probeId = accepted.correlationId;
    const at = Date.now();
    await page.click(byTestId('deliveries-refresh'));
    const row = `${byTestId('delivery-row')}[data-correlation-id=${cssString(probeId)}]`;
    await page.click(`${row} a`);
    const first = await waitInPage(
      'the probe delivery is shown',
      (id) =>
        document.querySelector('[data-testid="delivery-id"]').textContent === id &&
        document.querySelector('[data-testid="delivery-status"]').dataset.status,
      probeId,
    );
    check(
      first === 'in-progress',
      `the probe was already ${first} ${Date.now() - at} ms after it was sent: nothing left to follow live`,
    );
    const end = await waitInPage('the stream ends with the delivery completed', () => {
      const live = document.querySelector('[data-testid="delivery-live"]');
      const status = document.querySelector('[data-testid="delivery-status"]').dataset.status;
      const echoed = document.querySelector(
        '[data-testid="timeline-event"][data-message-type="ProbeEchoed"][data-status="completed"]',
      );
      return live.dataset.state === 'ended' && status === 'completed' && echoed ? Number(live.dataset.lines) : null;
    });
    console.log(`  in-progress -> completed over the live stream (${end} lines) in ${Date.now() - at} ms`);
  });
}

await step('the sagas section lists sagas with their state', async () => {
  await page.click(byTestId('tab-sagas'));
  await page.waitForSelector(`${byTestId('section-sagas')}:visible`);
  await waitInPage(
    'the sagas are listed (or the list says there are none)',
    () =>
      document.querySelectorAll('[data-testid="saga-row"]').length > 0 ||
      !document.querySelector('[data-testid="sagas-empty"]').hidden,
  );
  const errors = await page.locator(`${byTestId('sagas-error')} ${byTestId('error')}`).count();
  check(errors === 0, `the sagas section shows an error: ${await page.textContent(byTestId('sagas-error'))}`);
  const sagas = await page.locator(byTestId('saga-row')).count();
  check(!liveProbe || sagas >= 1, 'the probe saga is not listed');
  if (sagas) {
    const saga = await page.getAttribute(`${byTestId('saga-row')} >> nth=0`, 'data-saga');
    await page.click(`${byTestId('saga-row')} >> nth=0 >> a`);
    await page.waitForSelector(`${byTestId('saga-detail')}:visible`);
    const state = JSON.parse(await page.textContent(byTestId('saga-state')));
    check(state && typeof state === 'object', `the state of ${saga} is not a JSON object`);
    console.log(`  ${sagas} saga(s); ${saga}: ${Object.keys(state).length} state field(s)`);
  }
});

await step('a whole delivery is drawn as a waterfall of its hops', async () => {
  await page.goto(`${baseUrl}/console#/deliveries/${encodeURIComponent(demoDelivery)}`);
  await page.waitForSelector(`${byTestId('delivery-detail')}:visible`);
  const rows = await waitInPage(
    'the waterfall has a row per hop, to GitOpsSynced',
    () => {
      const rows = [...document.querySelectorAll('[data-testid="waterfall-row"]')];
      return rows.some((row) => row.dataset.messageType === 'GitOpsSynced') ? rows.map((row) => [row.dataset.messageType, row.dataset.consumer]) : null;
    },
  );
  const consumers = new Set(rows.map(([, consumer]) => consumer).filter(Boolean));
  check(consumers.size >= 11, `the waterfall shows ${consumers.size} consumers, not the eleven: ${[...consumers].join(', ')}`);
  check(rows[0][0] !== 'GitOpsSynced', 'the rows are not in the order of the delivery');
  const completed = await page.locator(`${byTestId('waterfall-bar')}[data-status="completed"]`).count();
  check(completed >= consumers.size, `${completed} completed bars for ${consumers.size} consumers`);
  const titled = await page.$$eval('[data-testid="waterfall-bar"] title', (nodes) => nodes.map((n) => n.textContent));
  // Every bar says how long (a hop whose consumer does not run here, such
  // as GitOpsSynced's release-orchestration, is still waiting).
  const untimed = titled.filter((t) => !/ after <?\d|waiting for <?\d|no consumer/.test(t));
  check(untimed.length === 0, `a bar does not say how long: ${untimed.join(' | ')}`);
  // A message no consumer receives is a mark, not a wait.
  const unrouted = await page.$$eval('[data-testid="waterfall-row"][data-message-type="PipelineGenerated"] title', (nodes) =>
    nodes.map((n) => n.textContent),
  );
  check(unrouted.length === 1 && /no consumer/.test(unrouted[0]), `PipelineGenerated is drawn as ${unrouted.join(' | ')}`);
  const png = await pictureOf(byTestId('delivery-waterfall'), 'waterfall');
  const green = pixelsOf(png, await cssColour('--ok'));
  check(green > 200, `the waterfall's screenshot has ${green} pixels of the completed colour`);
  console.log(`  ${rows.length} rows, ${consumers.size} consumers, ${completed} completed bars, ${green} completed pixels`);
});

await step("a failed delivery's waterfall highlights its retries and its dead letter", async () => {
  await page.goto(`${baseUrl}/console#/deliveries`);
  const failed = `${byTestId('delivery-row')}[data-status="failed"]`;
  await page.waitForSelector(failed);
  await page.click(`${failed} >> nth=0 >> a`);
  await page.waitForSelector(`${byTestId('waterfall-bar')}[data-status="dead-lettered"]`);
  const statuses = await page.$$eval('[data-testid="waterfall-bar"]', (bars) => bars.map((bar) => bar.dataset.status));
  check(statuses.includes('retry-scheduled'), `no retry is drawn: ${statuses.join(', ')}`);
  const row = await page.getAttribute('[data-testid="waterfall-row"].wf-failed', 'data-consumer');
  check(row === 'commit', `the failed row is ${row}, not the commit consumer's`);
  const png = await pictureOf(byTestId('delivery-waterfall'), 'waterfall-failed');
  const red = pixelsOf(png, await cssColour('--bad'));
  check(red > 50, `the failed waterfall has ${red} pixels of the failure colour`);
  console.log(`  bars: ${statuses.join(', ')}; ${red} failure pixels`);
});

await step('a dead-lettered delivery opens with what ended it, a replay button and a link to the dead letter', async () => {
  // The failed delivery opened by the step before.
  const banner = byTestId('delivery-outcome');
  await page.waitForSelector(`${banner}[data-state="failed"]:visible`);
  check((await page.getAttribute(banner, 'data-cause')) === 'dead-letter', 'the banner does not say dead letter');
  const sentence = (await page.textContent(byTestId('delivery-outcome-sentence'))).trim();
  check(
    /^Failed: CreateCommit was dead-lettered by commit on attempt \d+: retries-exhausted: .*; next: replay dead letter [0-9a-f-]{36}/.test(sentence),
    `the sentence reads: ${sentence}`,
  );
  const actions = await page.$$eval('[data-testid="outcome-action"]', (nodes) =>
    nodes.map((node) => ({ kind: node.dataset.kind, target: node.dataset.target, tag: node.tagName, href: node.getAttribute('href') })),
  );
  const replay = actions.find((action) => action.kind === 'replay-dead-letter');
  const open = actions.find((action) => action.kind === 'open-dead-letter');
  check(replay && replay.tag === 'BUTTON' && sentence.includes(replay.target), `no replay button for the dead letter: ${JSON.stringify(actions)}`);
  check(open && open.href === `#/dead-letters/${open.target}` && open.target === replay.target, `no link to the dead letter: ${JSON.stringify(actions)}`);
  // The attempts the timeline shows count from 1, as the card's.
  const attempts = await page.$$eval('[data-testid="timeline-event-attempt"]', (cells) => cells.map((cell) => Number(cell.textContent)));
  check(attempts.length && attempts.every((n) => n >= 1), `attempts in the timeline: ${attempts.join(', ')}`);
  const card = (await page.textContent(`${byTestId('delivery-message')}[data-message-type="CreateCommit"]`)) ?? '';
  check(card.includes(`attempts ${Math.max(...attempts)}`), `the card's attempts differ from the timeline's ${Math.max(...attempts)}: ${card}`);
  // The link opens the dead letter (nothing replayed: the group steps below replay it).
  await page.click(`[data-testid="outcome-action"][data-kind="open-dead-letter"]`);
  await waitInPage(
    'the dead letter opens',
    (id) => document.querySelector('[data-testid="dl-detail-id"]')?.textContent === id,
    open.target,
  );
  console.log(`  ${sentence}`);
});

if (failedDelivery) {
  await step('a release stopped by a failing unit test opens with what ended it, its hop red', async () => {
    // Its tenant's key (the delivery is fabrikam's), put back at the end.
    await page.fill('#api-key', failedKey);
    await page.click(byTestId('key-save'));
    await page.waitForSelector(`${byTestId('key-state')}[data-state="set"]`);
    await page.goto(`${baseUrl}/console#/deliveries/${encodeURIComponent(failedDelivery)}`);
    const banner = byTestId('delivery-outcome');
    await page.waitForSelector(`${banner}[data-state="failed"]:visible`);
    await page.waitForSelector(`${byTestId('waterfall-row')}[data-message-type="ReleaseBlocked"]`);
    check((await page.getAttribute(banner, 'data-cause')) === 'release-blocked', 'the banner does not say the release was blocked');
    const sentence = (await page.textContent(byTestId('delivery-outcome-sentence'))).trim();
    check(
      sentence.startsWith('Failed: ReleaseBlocked from release-orchestration: release ') &&
        sentence.includes('stopped at its build step') &&
        sentence.includes('add_two_and_three') &&
        sentence.includes('next: open the release saga fabrikam/'),
      `the sentence reads: ${sentence}`,
    );
    // First on the page: above the waterfall, the cards and the timeline; red.
    const top = async (selector) => (await page.locator(selector).first().boundingBox())?.y ?? -1;
    const bannerTop = await top(banner);
    for (const below of [byTestId('delivery-waterfall'), byTestId('delivery-message'), byTestId('timeline')]) {
      check(bannerTop >= 0 && bannerTop < (await top(below)), `the banner is not above ${below}`);
    }
    const colours = await page.$eval(banner, (node) => [getComputedStyle(node).borderLeftColor, getComputedStyle(node).backgroundColor]);
    const [bad, badBg] = await page.evaluate(() => {
      const probe = document.createElement('span');
      document.body.append(probe);
      probe.style.color = 'var(--bad)';
      probe.style.backgroundColor = 'var(--bad-bg)';
      const style = getComputedStyle(probe);
      const found = [style.color, style.backgroundColor];
      probe.remove();
      return found;
    });
    check(colours[0] === bad && colours[1] === badBg, `the banner is ${colours.join(' on ')}, not red (${bad} on ${badBg})`);
    const release = await page.$eval('[data-testid="outcome-action"][data-kind="open-release"]', (node) => ({
      target: node.dataset.target,
      href: node.getAttribute('href'),
    }));
    check(
      release.target.startsWith('fabrikam/') && release.href === `#/sagas/release/${encodeURIComponent(release.target)}`,
      `the release link: ${JSON.stringify(release)}`,
    );
    // The hop that ended it is red; no other is.
    const ended = await page.$$eval('[data-testid="waterfall-row"][data-ended="true"]', (rows) =>
      rows.map((row) => ({
        type: row.dataset.messageType,
        failed: row.classList.contains('wf-failed'),
        bars: [...row.querySelectorAll('[data-testid="waterfall-bar"]')].map((bar) => [bar.dataset.status, getComputedStyle(bar).fill]),
      })),
    );
    check(
      ended.length === 1 && ended[0].type === 'ReleaseBlocked' && ended[0].failed && ended[0].bars.every(([, fill]) => fill === bad),
      `the ended hops: ${JSON.stringify(ended)} (failure colour ${bad})`,
    );
    check(ended[0].bars[0][0] === 'published', `ReleaseBlocked is drawn as ${ended[0].bars[0][0]}`);
    // Events no consumer receives are published: neutral, not an amber "sent".
    const published = await page.$$eval('[data-testid="delivery-message"][data-status="published"]', (cards) =>
      cards.map((card) => [card.dataset.messageType, getComputedStyle(card.querySelector('[data-testid="delivery-message-status"]')).color]),
    );
    const [muted, warn] = await page.evaluate(() => {
      const probe = document.createElement('span');
      document.body.append(probe);
      probe.style.color = 'var(--muted)';
      const first = getComputedStyle(probe).color;
      probe.style.color = 'var(--warn)';
      const second = getComputedStyle(probe).color;
      probe.remove();
      return [first, second];
    });
    const types = published.map(([type]) => type);
    check(types.includes('ReleaseBlocked') && types.includes('PipelineGenerated'), `published cards: ${types.join(', ')}`);
    check(published.every(([, colour]) => colour === muted && colour !== warn), `published badges: ${JSON.stringify(published)}`);
    // Every time to the millisecond, saying its zone; attempts from 1.
    const times = await page.$$eval('[data-testid="delivery-detail"] time', (nodes) => nodes.map((node) => node.textContent));
    const odd = times.filter((shown) => !/^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC$/.test(shown));
    check(times.length > 10 && odd.length === 0, `times not shown as YYYY-MM-DD HH:MM:SS.mmm UTC: ${odd.slice(0, 5).join(' | ')}`);
    const attempts = await page.$$eval('[data-testid="timeline-event-attempt"]', (cells) => cells.map((cell) => cell.textContent));
    check(attempts.length && attempts.every((n) => Number(n) >= 1), `attempts in the timeline: ${attempts.join(', ')}`);
    // The page as an operator sees it, kept with the pictures.
    const dir = picturesDir || mkdtempSync(join(tmpdir(), 'bosun-console-'));
    const path = join(dir, 'delivery-failed.png');
    await page.screenshot({ path, fullPage: true });
    const png = await pictureOf(banner, 'delivery-failed-banner');
    const red = pixelsOf(png, await cssColour('--bad'));
    check(red > 200, `the banner's screenshot has ${red} pixels of the failure colour`);
    console.log(`  ${sentence}\n  page screenshot at ${path}; ${red} failure pixels in the banner`);
    // Its link opens the release saga, blocked.
    await page.click('[data-testid="outcome-action"][data-kind="open-release"]');
    await page.waitForSelector(`${byTestId('release-panel')}:visible`);
    const phase = await waitInPage('the release page shows its phase', () =>
      document.querySelector('[data-testid="release-phase"]')?.dataset.status,
    );
    check(phase === 'blocked', `the release is ${phase}, not blocked`);
    await page.fill('#api-key', key);
    await page.click(byTestId('key-save'));
    await page.waitForSelector(`${byTestId('key-state')}[data-state="set"]`);
  });
}

await step("the release saga's state machine shows where it is and the way it went", async () => {
  await page.goto(`${baseUrl}/console#/sagas`);
  await page.waitForSelector(`${byTestId('section-sagas')}:visible`);
  const row = `${byTestId('saga-row')}[data-kind="release"]`;
  await page.waitForSelector(row);
  await page.click(`${row} >> nth=0 >> a`);
  await page.waitForSelector(`${byTestId('saga-diagram')} svg`);
  const state = JSON.parse(await page.textContent(byTestId('saga-state')));
  const nodes = await page.$$eval('[data-testid="saga-state-node"]', (all) =>
    all.map((node) => ({ state: node.dataset.state, current: node.dataset.current, visited: node.dataset.visited })),
  );
  check(nodes.length === 7, `the release machine has 7 states, the picture ${nodes.length}`);
  const current = nodes.filter((node) => node.current === 'true');
  check(current.length === 1 && current[0].state === state.phase, `the current state drawn is ${JSON.stringify(current)}, the saga is ${state.phase}`);
  const visited = nodes.filter((node) => node.visited === 'true').map((node) => node.state);
  check(visited.includes('collecting') && visited.length >= 3, `visited: ${visited.join(', ')}`);
  const moves = await page.$$eval('[data-testid="saga-transition"]', (all) =>
    all.filter((edge) => Number(edge.dataset.taken) > 0 && edge.dataset.from !== edge.dataset.to).map((edge) => `${edge.dataset.from}->${edge.dataset.to}`),
  );
  check(moves.length >= visited.length - 1, `taken transitions: ${moves.join(', ')}`);
  const png = await pictureOf(byTestId('saga-diagram'), 'saga-diagram');
  const accent = pixelsOf(png, await cssColour('--accent'));
  check(accent > 500, `the diagram's screenshot has ${accent} pixels of the highlight colour`);
  console.log(`  now ${state.phase}; visited ${visited.join(', ')}; taken ${moves.join(', ')}; ${accent} highlighted pixels`);
});

await step('the release page says where each environment is and lists every decision taken', async () => {
  // The release saga opened by the step before.
  await page.waitForSelector(`${byTestId('release-panel')}:visible`);
  const phase = await page.getAttribute(byTestId('release-phase'), 'data-status');
  check(phase === 'completed', `the demo's release is ${phase}`);
  const environments = await page.$$eval('[data-testid="release-environment"]', (rows) =>
    rows.map((row) => ({
      environment: row.dataset.environment,
      status: row.querySelector('[data-testid="release-environment-status"]').dataset.status,
    })),
  );
  check(
    environments.length >= 1 && environments.every((row) => row.status === 'deployed'),
    `environments: ${JSON.stringify(environments)}`,
  );
  await page.waitForSelector(byTestId('release-audit-row'));
  const actions = await page.$$eval('[data-testid="release-audit-row"]', (rows) => rows.map((row) => row.dataset.action));
  for (const wanted of ['requested', 'approved', 'promoted', 'deployed', 'completed']) {
    check(actions.includes(wanted), `the release's decisions lack ${wanted}: ${actions.join(', ')}`);
  }
  check(actions.indexOf('requested') < actions.indexOf('completed'), `decisions out of order: ${actions.join(', ')}`);
  const errors = await page.locator(`#release-audit-error ${byTestId('error')}`).count();
  check(errors === 0, 'the release audit shows an error');
  console.log(`  ${environments.map((row) => `${row.environment} ${row.status}`).join(', ')}; decisions: ${actions.join(', ')}`);
});

await step("the release page shows its verification and each environment's releases, and a refused rollback says why", async () => {
  // The release saga opened by the steps before.
  await page.waitForSelector(`${byTestId('release-panel')}:visible`);
  const state = JSON.parse(await page.textContent(byTestId('saga-state')));
  const verifiedIn = Object.keys(state.verified ?? {}).sort();
  const shown = (await page.$$eval('[data-testid="release-verified-environment"]', (all) => all.map((node) => node.dataset.environment))).sort();
  check(JSON.stringify(shown) === JSON.stringify(verifiedIn), `verified in ${verifiedIn.join(', ')}, shown ${shown.join(', ')}`);
  // Each environment's row fills in from GET /v1/tenants/{tenant}/environments/{environment}.
  const rows = await waitInPage('every environment says what it runs', () => {
    const cells = [...document.querySelectorAll('[data-testid="release-environment-current"]')];
    if (!cells.length || cells.some((cell) => cell.dataset.release === undefined)) return null;
    // The promotion graph's column fills in from the tenant's policy (the
    // demo's has none: nothing required).
    const requires = [...document.querySelectorAll('[data-testid="release-environment-requires"]')];
    if (requires.length !== cells.length || requires.some((cell) => cell.dataset.requires === undefined)) return null;
    return [...document.querySelectorAll('[data-testid="release-environment"]')].map((row) => ({
      environment: row.dataset.environment,
      current: row.querySelector('[data-testid="release-environment-current"]').dataset.release,
      verified: row.querySelector('[data-testid="release-environment-verified"]').dataset.release,
    }));
  });
  check(rows.some((row) => row.current === state.releaseId), `no environment runs ${state.releaseId}: ${JSON.stringify(rows)}`);
  const errors = await page.locator(`#release-environments-error ${byTestId('error')}`).count();
  check(errors === 0, 'the environments show an error');
  // The demo's release is the only one there: nothing to go back to, and the console says so.
  const target = rows.find((row) => row.current === state.releaseId);
  await page.click(`${byTestId('release-environment')}[data-environment=${cssString(target.environment)}] ${byTestId('rollback-open')}`);
  await page.waitForSelector(`${byTestId('rollback-form')}:visible`);
  await page.fill(byTestId('rollback-reason'), 'console test');
  await page.click(byTestId('rollback-submit'));
  await page.waitForSelector(`#rollback-error ${byTestId('error')}`);
  const code = await page.getAttribute(`#rollback-error ${byTestId('error')}`, 'data-code');
  const message = await page.textContent(`#rollback-error ${byTestId('error-message')}`);
  check(code === 'invalid-field' && /go back to|refused by rule/.test(message), `the refusal reads ${code}: ${message}`);
  await page.click(byTestId('rollback-cancel'));
  console.log(`  ${rows.map((row) => `${row.environment} runs ${row.current || 'nothing'}, verified ${row.verified || 'none'}`).join('; ')}; rollback refused: ${message}`);
});

const deadRow = `${byTestId('dead-letter-row')}[data-reason=${cssString(reason)}]`;
let deadIds = [];

await step(`the dead letters with reason ${reason} are listed`, async () => {
  await page.click(byTestId('tab-dead-letters'));
  await page.getByLabel('Reason', { exact: true }).fill(reason);
  await page.click(byTestId('dl-apply'));
  await waitInPage(
    'at least two dead letters are listed',
    (selector) => document.querySelectorAll(selector).length >= 2,
    deadRow,
  );
  const rows = await page.$$eval(deadRow, (nodes) => nodes.map((node) => [node.dataset.id, node.dataset.status]));
  const others = await page.locator(`${byTestId('dead-letter-row')}:not([data-reason=${cssString(reason)}])`).count();
  check(others === 0, `the reason filter let ${others} other dead letter(s) through`);
  check(rows.every(([, status]) => status === 'dead'), `not all are dead: ${JSON.stringify(rows)}`);
  deadIds = rows.map(([id]) => id);
  console.log(`  ${deadIds.length} dead letter(s)`);
});

let group = null;

await step('the grouped view shows them as one group', async () => {
  await page.getByLabel('Grouped', { exact: true }).check();
  const groupRow = `${byTestId('dead-letter-group')}[data-reason=${cssString(reason)}]`;
  await page.waitForSelector(groupRow);
  group = await page.$eval(groupRow, (node) => ({ ...node.dataset }));
  check(Number(group.count) === deadIds.length, `the group counts ${group.count}, the list shows ${deadIds.length}`);
  check(/^[0-9a-f]{16}$/.test(group.fingerprint ?? ''), `the group has a fingerprint: ${group.fingerprint}`);
  // Its trend, drawn by the page itself: 24 hourly bars, the last one lit.
  const bars = await page.$$eval(`${groupRow} svg${byTestId('group-trend')} rect`, (rects) =>
    rects.map((rect) => rect.getAttribute('class')),
  );
  check(bars.length === 24 && bars[23] === 'some', `the trend has 24 bars, the last one lit: ${bars}`);
  console.log(`  group: ${group.count} × ${group.consumer} / ${group.type}, fingerprint ${group.fingerprint}`);
});

let payloadField = '';

await step('the dead letter detail shows the envelope', async () => {
  await page.getByLabel('List', { exact: true }).check();
  await page.waitForSelector(deadRow);
  await page.click(`${deadRow}[data-id=${cssString(deadIds[0])}] a`);
  await page.waitForSelector(`${byTestId('dead-letter-detail')}:visible`);
  await waitInPage(
    'the detail shows the chosen dead letter',
    (id) => document.querySelector('[data-testid="dl-detail-id"]').textContent === id,
    deadIds[0],
  );
  const shownReason = (await page.textContent(byTestId('dl-detail-reason'))).trim();
  check(shownReason === reason, `the detail shows reason ${shownReason}`);
  const envelope = JSON.parse(await page.textContent(byTestId('dl-detail-envelope')));
  check(envelope && typeof envelope.payload === 'object', 'the envelope has no payload');
  const payload = JSON.parse(await page.inputValue(byTestId('edit-payload')));
  check(JSON.stringify(payload) === JSON.stringify(envelope.payload), 'the edit box does not hold the payload');
  payloadField = Object.keys(payload).find((name) => typeof payload[name] === 'string') ?? '';
  check(payloadField, 'the payload has no text field to break');
});

await step('an edit-and-replay with a bad payload shows the field', async () => {
  // A number where the contract wants text: the API answers 422 naming the field.
  const payload = JSON.parse(await page.inputValue(byTestId('edit-payload')));
  payload[payloadField] = 42;
  await page.getByLabel('Edit and replay: payload (JSON)', { exact: true }).fill(JSON.stringify(payload, null, 2));
  await page.click(byTestId('replay-edited'));
  const slot = byTestId('replay-error');
  await page.waitForSelector(`${slot} ${byTestId('error')}`);
  const code = (await page.textContent(`${slot} ${byTestId('error-code')}`)).trim();
  check(code === 'invalid-field', `the error code is ${code}: ${await page.textContent(slot)}`);
  const field = await page.getAttribute(`${slot} ${byTestId('error-field')}`, 'data-field').catch(() => null);
  check(field && field.includes(payloadField), `the error names field ${field}, not ${payloadField}`);
  check(
    (await page.getAttribute(byTestId('edit-payload'), 'aria-invalid')) === 'true',
    'the payload box is not marked invalid',
  );
  const status = await page.getAttribute(byTestId('dl-detail-status'), 'data-status');
  check(status === 'dead', `the rejected replay changed the dead letter to ${status}`);
  console.log(`  ${code} on ${field}`);
});

await step('a payload that is not JSON is caught in the page', async () => {
  await page.fill(byTestId('edit-payload'), '{"oops": ');
  await page.click(byTestId('replay-edited'));
  await page.waitForSelector(`${byTestId('replay-error')} [data-code="malformed-json"]`);
});

await step('replaying the group at a rate runs the progress bar to the end', async () => {
  await page.getByLabel('Grouped', { exact: true }).check();
  const groupRow = `${byTestId('dead-letter-group')}[data-reason=${cssString(reason)}]`;
  await page.click(`${groupRow} ${byTestId('group-replay')}`);
  await page.waitForSelector(`${byTestId('bulk-replay')}:visible`);
  await page.getByLabel('Rate (per second)', { exact: true }).fill('2');
  const at = Date.now();
  await page.click(byTestId('bulk-start'));
  await page.waitForSelector(`${byTestId('bulk-progress')}:visible`);
  // The job is stored: paused, it stays where it is and says who paused
  // it; resumed, it carries on. (With one dead letter it may be done
  // before the click: then there is nothing to pause.)
  if (deadIds.length > 1) {
    await page.click(`${byTestId('bulk-pause')}:visible`, { timeout: 5000 });
    await page.waitForSelector(`${byTestId('bulk-status')}[data-status="paused"]`);
    await page.waitForSelector(`${byTestId('bulk-resume')}:visible`);
    const log = await page.textContent(byTestId('bulk-controls-log'));
    check(/^pause by key:/.test(log), `the pause is not recorded with the key: ${log}`);
    const held = await page.textContent(byTestId('bulk-progress-text'));
    await page.waitForTimeout(1000);
    const still = await page.textContent(byTestId('bulk-progress-text'));
    check(held === still, `a paused job moved on: ${held} then ${still}`);
    await page.click(byTestId('bulk-resume'));
    await page.waitForSelector(`${byTestId('bulk-status')}:not([data-status="paused"])`);
    console.log(`  paused at ${held}, resumed`);
  }
  const seen = new Set();
  const deadline = Date.now() + Math.max(timeout, (deadIds.length / 2) * 1000 + 30000);
  let progress;
  for (;;) {
    progress = await page.evaluate(() => {
      const bar = document.querySelector('[data-testid="bulk-progress"]');
      return {
        state: bar.dataset.state,
        value: bar.value,
        max: bar.max,
        text: document.querySelector('[data-testid="bulk-progress-text"]').textContent,
        failed: document.querySelectorAll('[data-testid="bulk-failure"]').length,
        error: document.querySelector('[data-testid="bulk-error"]').textContent,
      };
    });
    seen.add(`${progress.state} ${progress.value}/${progress.max}`);
    if (progress.error) throw new Error(`the replay shows an error: ${progress.error}`);
    if (progress.state === 'finished') break;
    if (Date.now() > deadline) throw new Error(`the replay did not finish; last: ${JSON.stringify(progress)}`);
    await page.waitForTimeout(100);
  }
  check(progress.max === deadIds.length, `the bar's total is ${progress.max}, not ${deadIds.length}`);
  check(progress.value === progress.max, `the bar ended at ${progress.value} of ${progress.max}`);
  check(progress.failed === 0, `${progress.failed} replay(s) failed: ${await page.textContent(byTestId('bulk-failed'))}`);
  console.log(`  ${progress.text} in ${Date.now() - at} ms; bar states seen: ${[...seen].join(', ')}`);
});

await step('the dead letters of the group are now marked replayed', async () => {
  await page.getByLabel('List', { exact: true }).check();
  await page.getByLabel('Include replayed', { exact: true }).check();
  await waitInPage(
    'every dead letter of the group shows replayed',
    (ids) =>
      ids.every(
        (id) =>
          document.querySelector(`[data-testid="dead-letter-row"][data-id="${CSS.escape(id)}"]`)?.dataset.status ===
          'replayed',
      ),
    deadIds,
  );
  await page.click(`${deadRow}[data-id=${cssString(deadIds[1])}] a`);
  await waitInPage(
    'the detail shows the replay',
    (id) =>
      document.querySelector('[data-testid="dl-detail-id"]').textContent === id &&
      document.querySelector('[data-testid="dl-detail-status"]').dataset.status === 'replayed' &&
      document.querySelectorAll('[data-testid="dl-detail-replay"]').length >= 1,
    deadIds[1],
  );
});

await step('an edit-and-replay shows what it changed, field by field', async () => {
  // The detail of a replayed dead letter is open; replay it again with one
  // text field changed.
  const payload = JSON.parse(await page.inputValue(byTestId('edit-payload')));
  const before = payload[payloadField];
  payload[payloadField] = `${before}-fixed`;
  await page.getByLabel('Edit and replay: payload (JSON)', { exact: true }).fill(JSON.stringify(payload, null, 2));
  await page.click(byTestId('replay-edited'));
  const change = `${byTestId('dl-detail-replay-diff')} li[data-path=${cssString(`/${payloadField}`)}]`;
  await page.waitForSelector(change);
  const shown = (await page.textContent(change)).trim();
  check(
    shown.includes(JSON.stringify(before)) && shown.includes(JSON.stringify(`${before}-fixed`)),
    `the diff shows before and after: ${shown}`,
  );
  console.log(`  diff: ${shown}`);
});

await screenshot();

await step('the page asked nothing of any other origin', async () => {
  check(outside.length === 0, `requests outside bosun: ${outside.join(', ')}`);
});

await controlSteps({ page, step, check, byTestId, cssString, waitInPage, pictureOf, platformKey: env('BOSUN_PLATFORM_KEY') });

await step('a wrong key is refused and said so', async () => {
  await page.fill('#api-key', 'bsn_nobody_notasecret');
  await page.click(byTestId('key-save'));
  await page.waitForSelector(`${byTestId('key-state')}[data-state="refused"]`);
  await page.waitForSelector(`${byTestId('dl-error')} [data-code="unauthorized"]`);
});

await shutdown();
console.log(`console test: ${passed} passed, 0 failed in ${((Date.now() - started) / 1000).toFixed(1)} s`);
