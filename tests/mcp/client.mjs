// A real MCP client against bosun: the official TypeScript SDK
// (@modelcontextprotocol/sdk, installed by scripts/mcp-sdk) connects over
// stdio (spawning `bosun mcp`) and over Streamable HTTP (POST /mcp of a
// running `bosun serve --http`), lists the tools, sends a Probe command,
// follows its delivery until it completes and checks how refusals come back.
// Over HTTP it also checks the negotiated protocol version (the SDK's newest)
// and that /mcp keeps no session (no Mcp-Session-Id).
//
//   NODE_PATH="$(scripts/mcp-sdk node-path)" \
//   BOSUN_BIN=target/debug/bosun BOSUN_DATA_DIR=DIR BOSUN_API_KEY=bsn_... \
//   BOSUN_URL=http://127.0.0.1:PORT node tests/mcp/client.mjs
//
// Env:
//   BOSUN_BIN        the bosun binary (stdio: `$BOSUN_BIN mcp`)
//   BOSUN_DATA_DIR   the data directory `bosun serve` uses (given to `bosun mcp`)
//   BOSUN_API_KEY    a key of tenant contoso with the admin scope
//   BOSUN_URL        where `bosun serve --http` listens (HTTP: BOSUN_URL/mcp)
//   BOSUN_MCP_ONLY   optional: `stdio` or `http` to try one transport only
//
// The delivery completes only when `bosun serve` runs the probe consumer.
// Prints one line per check that passed; exits 1 with the reason on the
// first failure.

import { createRequire } from 'node:module';
import { randomUUID } from 'node:crypto';

const require = createRequire(import.meta.url);

function fail(message) {
  console.error(`mcp client: ${message}`);
  process.exit(1);
}

function need(name) {
  const value = process.env[name];
  if (!value) fail(`${name} is not set`);
  return value;
}

function check(condition, message, detail) {
  if (!condition) {
    fail(`${message}${detail === undefined ? '' : `: ${JSON.stringify(detail, null, 2)}`}`);
  }
}

let sdk;
try {
  sdk = {
    ...require('@modelcontextprotocol/sdk/client/index.js'),
    ...require('@modelcontextprotocol/sdk/client/stdio.js'),
    ...require('@modelcontextprotocol/sdk/client/streamableHttp.js'),
    ...require('@modelcontextprotocol/sdk/types.js'),
  };
} catch (err) {
  fail(`cannot load @modelcontextprotocol/sdk (run with NODE_PATH="$(scripts/mcp-sdk node-path)"): ${err.message}`);
}
const { Client, StdioClientTransport, StreamableHTTPClientTransport, LATEST_PROTOCOL_VERSION } = sdk;

const bin = need('BOSUN_BIN');
const dataDir = need('BOSUN_DATA_DIR');
const key = need('BOSUN_API_KEY');
const url = need('BOSUN_URL');
const only = process.env.BOSUN_MCP_ONLY;
const run = randomUUID().slice(0, 8);
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const TOOLS = ['send_command', 'get_delivery', 'wait_for_delivery', 'list_failures', 'replay_failure'];

/** Calls a tool; returns { isError, value } after checking the result's shape. */
async function call(client, name, args, options) {
  const result = await client.callTool({ name, arguments: args }, undefined, options);
  check(Array.isArray(result.content) && result.content[0]?.type === 'text', `${name}: no text content`, result);
  let fromText;
  try {
    fromText = JSON.parse(result.content[0].text);
  } catch (err) {
    fail(`${name}: the text content is not JSON (${err.message}): ${result.content[0].text}`);
  }
  check(
    JSON.stringify(fromText) === JSON.stringify(result.structuredContent),
    `${name}: text and structuredContent differ`,
    result,
  );
  return { isError: result.isError === true, value: result.structuredContent };
}

async function exercise(label, transport) {
  const client = new Client({ name: 'bosun-mcp-e2e', version: '1.0.0' });
  await client.connect(transport);
  const server = client.getServerVersion();
  check(server?.name === 'bosun' && typeof server.version === 'string', `${label}: serverInfo`, server);
  check(client.getServerCapabilities()?.tools, `${label}: the server offers tools`, client.getServerCapabilities());
  check((client.getInstructions() ?? '').includes('send_command'), `${label}: instructions mention send_command`);
  console.log(`${label}: initialized (bosun ${server.version})`);
  if (transport instanceof StreamableHTTPClientTransport) {
    // The client asks for its newest version, which bosun speaks; /mcp is
    // stateless, so no session id comes back.
    check(
      transport.protocolVersion === LATEST_PROTOCOL_VERSION,
      `${label}: negotiated the client's newest protocol version`,
      { negotiated: transport.protocolVersion, latest: LATEST_PROTOCOL_VERSION },
    );
    check(transport.sessionId === undefined, `${label}: no session (stateless)`, transport.sessionId);
    console.log(`${label}: protocol ${transport.protocolVersion}, stateless (no Mcp-Session-Id)`);
  }

  await client.ping();

  const { tools } = await client.listTools();
  const names = tools.map((tool) => tool.name);
  for (const name of TOOLS) check(names.includes(name), `${label}: tools/list lacks ${name}`, names);
  const send = tools.find((tool) => tool.name === 'send_command');
  check(send.description.includes('- CreateCommit:'), `${label}: send_command lists the commands`, send.description);
  check(send.inputSchema.required?.includes('payload'), `${label}: send_command requires payload`, send.inputSchema);
  const commands = send.inputSchema.properties?.type?.enum ?? [];
  check(
    commands.includes('Probe') && !commands.includes('ReleaseApprovalTimeout'),
    `${label}: send_command's type lists the sendable commands only`,
    commands,
  );
  check(send.inputSchema.$defs?.Probe?.properties?.group, `${label}: the Probe payload schema is in $defs`, send.inputSchema);
  console.log(`${label}: tools/list has ${names.join(', ')}`);

  const args = {
    type: 'Probe',
    payload: { group: `mcp-${label}`, sequence: 1 },
    idempotencyKey: `mcp-e2e-${label}-${run}`,
  };
  const sent = await call(client, 'send_command', args);
  check(!sent.isError, `${label}: send_command failed`, sent.value);
  check(UUID.test(sent.value.correlationId), `${label}: send_command returns a correlationId`, sent.value);
  check(sent.value.tenantId === 'contoso' && sent.value.messageType === 'Probe', `${label}: sent`, sent.value);
  const correlationId = sent.value.correlationId;
  console.log(`${label}: send_command accepted Probe, delivery ${correlationId}`);

  const again = await call(client, 'send_command', args);
  check(!again.isError && again.value.replayed === true, `${label}: the same idempotencyKey replays`, again.value);
  check(again.value.correlationId === correlationId, `${label}: the replay has the same delivery`, again.value);
  console.log(`${label}: send_command with the same idempotencyKey sent nothing new`);

  const got = await call(client, 'get_delivery', { correlationId });
  check(!got.isError, `${label}: get_delivery failed`, got.value);
  check(got.value.correlationId === correlationId && got.value.tenantId === 'contoso', `${label}: get_delivery`, got.value);
  check(got.value.messages?.[0]?.messageType === 'Probe', `${label}: the delivery starts with the Probe`, got.value);
  console.log(`${label}: get_delivery shows it (${got.value.status})`);

  const waited = await call(client, 'wait_for_delivery', { correlationId, timeoutSeconds: 45 }, { timeout: 55_000 });
  check(!waited.isError, `${label}: wait_for_delivery failed`, waited.value);
  check(waited.value.status === 'completed' && waited.value.timedOut === false, `${label}: the delivery completes`, waited.value);
  const types = waited.value.messages.map((message) => message.messageType);
  check(types.includes('ProbeEchoed'), `${label}: the delivery holds the echo`, types);
  console.log(`${label}: wait_for_delivery returned ${waited.value.status} with ${types.join(', ')}`);

  const invalid = await call(client, 'send_command', { type: 'Probe', payload: { group: 'mcp', workMs: 999999 } });
  check(invalid.isError, `${label}: an invalid payload is refused`, invalid.value);
  check(
    invalid.value.error?.code === 'invalid-field' && invalid.value.error?.field === 'payload.workMs',
    `${label}: the refusal names the field`,
    invalid.value,
  );
  console.log(`${label}: an invalid payload comes back as isError naming ${invalid.value.error.field}`);

  const missing = await call(client, 'get_delivery', { correlationId: randomUUID() });
  check(missing.isError && missing.value.error?.code === 'not-found', `${label}: an unknown delivery`, missing.value);
  console.log(`${label}: an unknown delivery is not-found`);

  const failures = await call(client, 'list_failures', { grouped: true });
  check(!failures.isError && Array.isArray(failures.value.groups), `${label}: list_failures`, failures.value);
  console.log(`${label}: list_failures answers (${failures.value.groups.length} groups)`);

  await client.close();
}

function stdioTransport() {
  const env = { ...process.env, BOSUN_API_KEY: key, BOSUN_DATA_DIR: dataDir };
  const transport = new StdioClientTransport({ command: bin, args: ['mcp'], env, stderr: 'pipe' });
  let stderr = '';
  transport.stderr?.on('data', (chunk) => {
    stderr += chunk;
  });
  return { transport, stderr: () => stderr };
}

async function main() {
  if (only !== 'http') {
    const { transport, stderr } = stdioTransport();
    try {
      await exercise('stdio', transport);
    } catch (err) {
      console.error(`bosun mcp stderr:\n${stderr()}`);
      throw err;
    }
  }
  if (only !== 'stdio') {
    const endpoint = new URL('/mcp', url);
    const headers = { Authorization: `Bearer ${key}` };
    await exercise('http', new StreamableHTTPClientTransport(endpoint, { requestInit: { headers } }));

    // A wrong key never gets past initialize.
    const refused = new Client({ name: 'bosun-mcp-e2e', version: '1.0.0' });
    const badKey = `bsn_${'0'.repeat(12)}_${'0'.repeat(64)}`;
    const bad = new StreamableHTTPClientTransport(endpoint, {
      requestInit: { headers: { Authorization: `Bearer ${badKey}` } },
    });
    let connected = false;
    try {
      await refused.connect(bad);
      connected = true;
    } catch (err) {
      check(/401|nauthori/.test(String(err?.message ?? err)), 'http: a wrong key is refused with 401', String(err));
    }
    check(!connected, 'http: a wrong key must not connect');
    await bad.close().catch(() => {});
    console.log('http: a wrong key is refused (401)');
  }
  console.log('mcp client: all checks passed');
}

main().then(
  () => process.exit(0),
  (err) => fail(err?.stack ?? String(err)),
);
