// The TypeScript MCP SDK (`@modelcontextprotocol/sdk`) as a host, for the conformance runner's
// `hosts` family. Runs one plan against one MCP server and prints one JSON object: what the SDK
// made of each step. The runner runs it twice, against the durable path (the connector) and
// against the upstream directly, and compares the two reports. Usage (NODE_PATH names the
// install's node_modules):
//
//   node ts_client.cjs --url http://127.0.0.1:PORT/mcp --plan '{"calls": [...], ...}'
//
// The plan is py_client.py's. The SDK's client speaks 2025-11-25 sessions and has no API for
// the tasks extension (io.modelcontextprotocol/tasks): the client declares it at initialize and
// sends tools/call, tasks/get and tasks/update through the SDK's own `request`, which is how an
// application uses a method the SDK does not wrap.
'use strict';
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');
const { McpError } = require('@modelcontextprotocol/sdk/types.js');
const { z } = require('zod');

const TASKS = 'io.modelcontextprotocol/tasks';
const AnyResult = z.object({}).passthrough();
const sleep = (ms) => new Promise((done) => setTimeout(done, ms));

function args() {
  const argv = process.argv.slice(2);
  const value = (name) => {
    const i = argv.indexOf(name);
    if (i < 0 || i + 1 >= argv.length) throw new Error(`missing ${name}`);
    return argv[i + 1];
  };
  return { url: value('--url'), plan: JSON.parse(value('--plan')) };
}

async function call(client, step, options) {
  try {
    const params = { name: step.tool, arguments: step.arguments || {} };
    return { result: await client.request({ method: 'tools/call', params }, AnyResult, options) };
  } catch (e) {
    if (e instanceof McpError) return { error: { code: e.code, message: e.message } };
    throw e;
  }
}

// A call that the server may answer with a task: followed with tasks/get to its end, an
// input_required task answered with tasks/update.
async function followed(client, step, options) {
  const outcome = await call(client, step, options);
  const created = outcome.result;
  if (!created || created.resultType !== 'task') return { ...outcome, task: null };
  const record = { task_id: created.taskId, statuses: [created.status], updates: 0 };
  for (let i = 0; i < 600; i++) {
    const got = await client.request({ method: 'tasks/get', params: { taskId: created.taskId } }, AnyResult, options);
    if (record.statuses[record.statuses.length - 1] !== got.status) record.statuses.push(got.status);
    if (got.status === 'input_required') {
      const keys = Object.keys(got.inputRequests || {});
      record.asked = keys;
      const inputResponses = Object.fromEntries(keys.filter((k) => k in (step.answers || {})).map((k) => [k, step.answers[k]]));
      await client.request({ method: 'tasks/update', params: { taskId: created.taskId, inputResponses } }, AnyResult, options);
      record.updates += 1;
    } else if (got.status !== 'working') {
      record.end = got;
      const result = got.status === 'completed' ? got.result : undefined;
      return { result, error: got.error, task: record };
    }
    await sleep(500);
  }
  throw new Error(`task ${created.taskId} still active after 600 polls`);
}

async function allPages(listPage, items) {
  const found = [];
  let cursor;
  for (let i = 0; i < 100; i++) {
    const page = await listPage(cursor ? { cursor } : undefined);
    found.push(...page[items]);
    cursor = page.nextCursor;
    if (!cursor) break;
  }
  return found;
}

// Resources and prompts (every page), the first resource read and the first prompt got; an
// error (the SDK refusing an answer, say) is recorded in place of what it stopped.
async function features(client) {
  const out = {};
  try {
    out.resources = await allPages((p) => client.listResources(p), 'resources');
    if (out.resources.length) out.read = await client.readResource({ uri: out.resources[0].uri });
    out.prompts = await allPages((p) => client.listPrompts(p), 'prompts');
    if (out.prompts.length) {
      const first = out.prompts[0];
      const args = Object.fromEntries((first.arguments || []).filter((a) => a.required).map((a) => [a.name, 'x']));
      out.prompt = await client.getPrompt({ name: first.name, arguments: args });
    }
  } catch (e) {
    out.error = `${e && e.name}: ${e && e.message}`;
  }
  return out;
}

async function main() {
  const { url, plan } = args();
  const client = new Client(
    { name: 'durable-mcp-hosts-ts', version: '0' },
    { capabilities: { extensions: { [TASKS]: {} } } },
  );
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const options = { timeout: 120000 };
  const report = { sdk: '@modelcontextprotocol/sdk', calls: {}, tasks: {} };
  report.protocol_version = client.transport.protocolVersion;
  report.tools = (await client.listTools()).tools;
  for (const step of plan.calls || []) report.calls[step.label] = await call(client, step, options);
  for (const step of plan.tasks || []) report.tasks[step.label] = await followed(client, step, options);
  if (plan.features) report.features = await features(client);
  await client.close();
  process.stdout.write(JSON.stringify(report));
}

main().catch((e) => {
  process.stderr.write(`${e && e.stack ? e.stack : e}\n`);
  process.exit(1);
});
