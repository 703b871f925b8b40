// An ACP client written with the official TypeScript SDK (@agentclientprotocol/sdk, the
// version .ci/acp.sh pins). It starts the agent given as its argument, drives it through the
// protocol, and prints on stdout every update, permission request and answer it received, in
// a stable form; tests/acp.rs compares that output line for line. Every line the agent
// writes is also checked against the SDK's published JSON schema (schema/v1/schema.json):
// a line that does not validate is printed, which fails the comparison. Timings go to stderr.
//
//   node tests/acp/client.mjs target/debug/examples/acp_agent
//
// PAGENT_ACP_NODE_PATH names the node_modules directory that holds the SDK.

import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PassThrough, Readable, Writable } from "node:stream";
import { pathToFileURL } from "node:url";

const nodeModules = process.env.PAGENT_ACP_NODE_PATH;
if (!nodeModules) throw new Error("set PAGENT_ACP_NODE_PATH to the SDK's node_modules");
const require = createRequire(join(nodeModules, "resolve.js"));
const sdkPath = require.resolve("@agentclientprotocol/sdk");
const acp = await import(pathToFileURL(sdkPath).href);
const sdkVersion = JSON.parse(
  readFileSync(join(nodeModules, "@agentclientprotocol/sdk/package.json"), "utf8"),
).version;
console.error(`sdk ${sdkVersion}, protocol version ${acp.PROTOCOL_VERSION}`);

// The schema check: each request of the client is remembered by id, so that each answer is
// checked against the response type of its method.
const Ajv2020 = require("ajv/dist/2020").default;
const schema = JSON.parse(
  readFileSync(join(nodeModules, "@agentclientprotocol/sdk/schema/v1/schema.json"), "utf8"),
);
const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: false });
ajv.addSchema(schema, "acp");
const defs = Object.entries(schema.$defs);
const defOf = (method, side, suffix) =>
  defs.find(([name, d]) => d["x-method"] === method && d["x-side"] === side && name.endsWith(suffix))?.[0];
const validator = (name) => ajv.getSchema(`acp#/$defs/${name}`);
const envelope = ajv.compile({ $ref: "acp" });
const sent = new Map();
let checked = 0;
const invalid = [];
// The methods of the agent's requests by id, and those it gave up, in order (read here, in
// the order the agent wrote them, before the SDK handles them).
const agentRequests = new Map();
const givenUp = [];
function check(line) {
  if (!line.trim()) return;
  checked += 1;
  const m = JSON.parse(line);
  if (m.method !== undefined && m.id !== undefined) agentRequests.set(m.id, m.method);
  if (m.method === "$/cancel_request") givenUp.push(agentRequests.get(m.params?.requestId) ?? "?");
  const fail = (why) => invalid.push(`schema: ${why}: ${line}`);
  if (!envelope(m)) return fail(`not an ACP message (${ajv.errorsText(envelope.errors)})`);
  let name;
  let value;
  if (m.method !== undefined) {
    const side = m.method.startsWith("$/") ? "protocol" : "client";
    name = defOf(m.method, side, m.id !== undefined ? "Request" : "Notification");
    value = m.params;
  } else {
    const method = sent.get(m.id);
    if (m.error !== undefined) {
      name = "Error";
      value = m.error;
    } else if (method !== undefined) {
      name = defOf(method, "agent", "Response");
      value = m.result;
    }
  }
  if (name === undefined) {
    // Extension methods (`_session/steering`) have no schema of their own beyond the envelope.
    if ((m.method ?? sent.get(m.id) ?? "").startsWith("_")) return;
    return fail(`no schema for ${m.method ?? `the answer to ${sent.get(m.id)}`}`);
  }
  const v = validator(name);
  if (!v(value)) fail(`not a ${name} (${ajv.errorsText(v.errors)})`);
}
function tap(readable) {
  const out = new PassThrough();
  let rest = "";
  readable.on("data", (chunk) => {
    rest += chunk.toString("utf8");
    let i;
    while ((i = rest.indexOf("\n")) >= 0) {
      check(rest.slice(0, i));
      rest = rest.slice(i + 1);
    }
    out.write(chunk);
  });
  readable.on("end", () => out.end());
  return out;
}
function remembering(writable) {
  return new Writable({
    write(chunk, encoding, done) {
      for (const line of chunk.toString("utf8").split("\n")) {
        if (!line.trim()) continue;
        try {
          const m = JSON.parse(line);
          if (m.method !== undefined && m.id !== undefined) sent.set(m.id, m.method);
        } catch {}
      }
      writable.write(chunk, encoding, done);
    },
    final(done) {
      writable.end();
      done();
    },
  });
}

// Nothing may hang: the whole conversation has this long.
const deadline = setTimeout(() => {
  console.error("timed out");
  process.exit(3);
}, 60_000);

const work = mkdtempSync(join(tmpdir(), "pagent-acp-"));
const agentProcess = spawn(process.argv[2], [], {
  stdio: ["pipe", "pipe", "inherit"],
  env: { ...process.env, PAGENT_ACP_SESSIONS: join(work, "sessions") },
});
const exited = new Promise((resolve) => agentProcess.on("exit", (code) => resolve(code)));

// Updates by session, in arrival order; printed (merged) at the end of each step.
const labels = new Map();
const pending = new Map();
const out = [];
const say = (line) => out.push(line);

function record(sessionId, line) {
  const label = labels.get(sessionId) ?? `?${sessionId}`;
  // The client's directory is a new one each run.
  if (typeof line === "string") line = line.split(work).join("<work>");
  if (!pending.has(label)) pending.set(label, []);
  pending.get(label).push(line);
}

// Consecutive chunks of one kind print as one line: their count and their text.
function flush(label) {
  const lines = pending.get(label) ?? [];
  pending.set(label, []);
  let run = null;
  const end = () => {
    if (run) say(`${label} ${run.kind} x${run.n} ${JSON.stringify(run.text)}`);
    run = null;
  };
  for (const item of lines) {
    if (typeof item === "object") {
      if (run && run.kind === item.kind) {
        run.n += 1;
        run.text += item.text;
      } else {
        end();
        run = { ...item, n: 1 };
      }
    } else {
      end();
      say(`${label} ${item}`);
    }
  }
  end();
}

function describe(update) {
  const u = update;
  switch (u.sessionUpdate) {
    case "agent_message_chunk":
    case "agent_thought_chunk":
    case "user_message_chunk":
      if (!/^m\d+$/.test(u.messageId ?? "")) return `${u.sessionUpdate} without a messageId`;
      return { kind: u.sessionUpdate, text: u.content.type === "text" ? u.content.text : `<${u.content.type}>` };
    case "tool_call":
      return `tool_call ${u.title} kind=${u.kind} status=${u.status} rawInput=${JSON.stringify(u.rawInput)}${located(u)}`;
    case "tool_call_update": {
      const parts = ["tool_call_update"];
      if (u.status) parts.push(`status=${u.status}`);
      if (u.content) parts.push(`content=${JSON.stringify(u.content.map(shown).join(""))}`);
      if (u.locations) parts.push(located(u).trim());
      if (u.rawInput !== undefined) parts.push(`rawInput=${JSON.stringify(u.rawInput)}`);
      if (u.rawOutput !== undefined) parts.push(`rawOutput=${JSON.stringify(u.rawOutput)}`);
      return parts.join(" ");
    }
    case "session_info_update":
      return `session_info_update title=${JSON.stringify(u.title)} updatedAt=${/Z$/.test(u.updatedAt) ? "a time" : u.updatedAt}`;
    case "config_option_update":
      return `config_option_update ${u.configOptions.map((o) => `${o.id}=${o.currentValue}`).join(" ")}`;
    case "usage_update":
      return `usage_update used>0=${u.used > 0} size=${u.size} cost=${u.cost ? `${u.cost.currency}>0:${u.cost.amount > 0}` : "none"}`;
    default:
      return `${u.sessionUpdate} ${JSON.stringify(u)}`;
  }
}

// A tool call's content block: text as it is, a diff or a terminal as a tag.
function shown(c) {
  switch (c.type) {
    case "content":
      return c.content.text;
    case "diff":
      return `<diff ${c.path} ${JSON.stringify(c.oldText)} -> ${JSON.stringify(c.newText)}>`;
    case "terminal":
      return `<terminal ${c.terminalId}>`;
  }
  return `<${c.type}?>`;
}
const located = (u) =>
  u.locations ? ` locations=${u.locations.map((l) => l.path + (l.line ? `:${l.line}` : "")).join(",")}` : "";

// The editor: its buffers (what fs/read_text_file reads and fs/write_text_file writes; the
// disk is not touched) and its terminals (real processes, run by node).
const buffers = new Map();
const terminals = new Map();
let terminalsMade = 0;
function editorSaid(sessionId, line) {
  record(sessionId, `editor: ${line}`);
}
function fromLine(text, line, limit) {
  if (line == null && limit == null) return text;
  const lines = text.split(/(?<=\n)/);
  const start = (line ?? 1) - 1;
  return lines.slice(start, limit == null ? undefined : start + limit).join("");
}
function terminalOf(params) {
  const t = terminals.get(params.terminalId);
  if (!t) throw acp.RequestError.invalidParams(undefined, `no terminal ${params.terminalId}`);
  return t;
}
function exitStatus(t) {
  return t.exit ? { exitCode: t.exit.code, signal: t.exit.signal } : null;
}

// How the client answers permission requests, in order.
const permissionAnswers = [];
const toolCallIds = new Map();

const app = acp
  .client()
  .onNotification("session/update", ({ params }) => {
    if (params.update.toolCallId) toolCallIds.set(params.update.toolCallId, params.sessionId);
    record(params.sessionId, describe(params.update));
  })
  .onRequest("elicitation/create", async ({ params }) => {
    const known = toolCallIds.get(params.toolCallId) === params.sessionId;
    record(
      params.sessionId,
      `elicitation ${params.mode} ${JSON.stringify(params.message)} ` +
        `fields=${Object.keys(params.requestedSchema?.properties ?? {}).join(",")} announced=${known} -> accept`,
    );
    return { action: "accept", content: { answer: "Ada" } };
  })
  .onRequest("session/request_permission", async ({ params, signal }) => {
    let answer = permissionAnswers.shift() ?? "reject_once";
    if (typeof answer === "function") answer = await answer(params, signal);
    if (answer === "cancelled") {
      record(params.sessionId, `request_permission ${params.toolCall.title} -> cancelled by the agent ($/cancel_request)`);
      return { outcome: { outcome: "cancelled" } };
    }
    const t = params.toolCall;
    const known = toolCallIds.get(t.toolCallId) === params.sessionId;
    record(
      params.sessionId,
      `request_permission ${t.title} kind=${t.kind} rawInput=${JSON.stringify(t.rawInput)} ` +
        `options=${params.options.map((o) => `${o.optionId}:${o.kind}`).join(",")} ` +
        `announced=${known}${t.content ? ` content=${JSON.stringify(t.content.map(shown).join(""))}` : ""}${located(t)} -> ${answer}`,
    );
    return { outcome: { outcome: "selected", optionId: answer } };
  });

app
  .onRequest("fs/read_text_file", async ({ params }) => {
    const text = buffers.get(params.path);
    editorSaid(params.sessionId, `read ${params.path} line=${params.line ?? "-"} limit=${params.limit ?? "-"}`);
    if (text === undefined) throw acp.RequestError.resourceNotFound(params.path);
    return { content: fromLine(text, params.line, params.limit) };
  })
  .onRequest("fs/write_text_file", async ({ params }) => {
    editorSaid(params.sessionId, `write ${params.path} ${JSON.stringify(params.content)}`);
    buffers.set(params.path, params.content);
    return {};
  })
  .onRequest("terminal/create", async ({ params }) => {
    terminalsMade += 1;
    const id = `term-${terminalsMade}`;
    const child = spawn(params.command, params.args ?? [], {
      cwd: params.cwd ?? work,
      env: { ...process.env, ...Object.fromEntries((params.env ?? []).map((e) => [e.name, e.value])) },
      stdio: ["ignore", "pipe", "pipe"],
    });
    const t = { child, output: "", limit: params.outputByteLimit ?? Infinity, truncated: false, exit: null };
    const take = (chunk) => {
      t.output += chunk.toString("utf8");
      while (Buffer.byteLength(t.output) > t.limit) {
        t.output = t.output.slice(1);
        t.truncated = true;
      }
    };
    child.stdout.on("data", take);
    child.stderr.on("data", take);
    t.exited = new Promise((resolve) =>
      child.on("close", (code, signal) => {
        t.exit = { code, signal };
        resolve();
      }),
    );
    terminals.set(id, t);
    editorSaid(params.sessionId, `terminal ${id} ${params.command} ${JSON.stringify(params.args)} cwd=${params.cwd}`);
    return { terminalId: id };
  })
  .onRequest("terminal/wait_for_exit", async ({ params, signal }) => {
    const t = terminalOf(params);
    const givenUp = new Promise((resolve) => signal?.addEventListener("abort", resolve, { once: true }));
    await Promise.race([t.exited, givenUp]);
    // The agent gave the wait up ($/cancel_request): it kills the command next.
    if (signal?.aborted) throw acp.RequestError.requestCancelled();
    editorSaid(params.sessionId, `${params.terminalId} exited ${JSON.stringify(exitStatus(t))}`);
    return exitStatus(t);
  })
  .onRequest("terminal/output", async ({ params }) => {
    const t = terminalOf(params);
    return { output: t.output, truncated: t.truncated, exitStatus: exitStatus(t) };
  })
  .onRequest("terminal/kill", async ({ params }) => {
    const t = terminalOf(params);
    t.child.kill();
    editorSaid(params.sessionId, `${params.terminalId} killed`);
    return {};
  })
  .onRequest("terminal/release", async ({ params }) => {
    const t = terminalOf(params);
    if (!t.exit) t.child.kill();
    terminals.delete(params.terminalId);
    editorSaid(params.sessionId, `${params.terminalId} released`);
    return {};
  });

const stream = acp.ndJsonStream(
  Writable.toWeb(remembering(agentProcess.stdin)),
  Readable.toWeb(tap(agentProcess.stdout)),
);
const connection = app.connect(stream);
const agent = connection.agent;
const text = (t) => [{ type: "text", text: t }];

async function prompt(label, sessionId, words) {
  say(`${label} prompt ${JSON.stringify(words)}`);
  const answer = await agent.request("session/prompt", { sessionId, prompt: text(words) });
  flush(label);
  say(`${label} stop ${answer.stopReason}`);
}

async function newSession(label) {
  const session = await agent.request("session/new", { cwd: work, mcpServers: [] });
  labels.set(session.sessionId, label);
  say(`${label} new session`);
  return session.sessionId;
}

async function refused(what, call) {
  try {
    await call();
    say(`${what}: answered?!`);
  } catch (e) {
    say(`${what}: error ${e.code}`);
  }
}

// 1. initialize
const init = await agent.request("initialize", {
  protocolVersion: acp.PROTOCOL_VERSION,
  clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true, elicitation: { form: {} } },
  clientInfo: { name: "pagent-acp-test", version: "1" },
});
say(
  `initialize protocolVersion=${init.protocolVersion} agent=${init.agentInfo.name} ` +
    `loadSession=${init.agentCapabilities.loadSession} ` +
    `prompt=${JSON.stringify(init.agentCapabilities.promptCapabilities)}`,
);

// 2. a session; a prompt that thinks and streams text
const a = await newSession("A");
await prompt("A", a, "hello");

// 3. a tool call that asks permission: allowed once, then rejected
permissionAnswers.push("allow_once");
await prompt("A", a, "write the notes");
say(`file notes.txt = ${JSON.stringify(readFileSync(join(work, "notes.txt"), "utf8"))}`);
rmSync(join(work, "notes.txt"));
permissionAnswers.push("reject_once");
await prompt("A", a, "write the notes again");
let exists = true;
try {
  readFileSync(join(work, "notes.txt"));
} catch {
  exists = false;
}
say(`file notes.txt exists=${exists}`);

// 4. a cancel in the middle of a streamed reply
say(`A prompt "tell me a story"`);
const story = agent.request("session/prompt", { sessionId: a, prompt: text("tell me a story") });
// Wait until the reply's first part has streamed (the demo model then stalls for a minute).
async function storyStarted() {
  for (let i = 0; i < 500; i++) {
    const got = (pending.get("A") ?? []).map((x) => x.text ?? "").join("");
    if (got === "Once upon a time, ") break;
    await new Promise((r) => setTimeout(r, 10));
  }
}
await storyStarted();
const cancelAt = performance.now();
await agent.notify("session/cancel", { sessionId: a });
const cancelled = await story;
const cancelMs = performance.now() - cancelAt;
console.error(`cancel_ms=${cancelMs.toFixed(2)}`);
flush("A");
say(`A stop ${cancelled.stopReason} (under 2 s after the cancel: ${cancelMs < 2000})`);

// 5. two sessions at once, each with its own agent; C allows its tool for good
const b = await newSession("B");
const c = await newSession("C");
permissionAnswers.push("allow_always");
const both = [
  agent.request("session/prompt", { sessionId: b, prompt: text("hello") }),
  agent.request("session/prompt", { sessionId: c, prompt: text("write the notes") }),
];
say(`B and C prompt at once`);
const [sb, sc] = await Promise.all(both);
flush("B");
say(`B stop ${sb.stopReason}`);
flush("C");
say(`C stop ${sc.stopReason}`);
// allow_always: the second call runs without asking.
await prompt("C", c, "write the notes once more");

// 6. malformed requests: errors, and the agent keeps serving
agentProcess.stdin.write("this is not json\n");
await refused("prompt without its prompt", () => agent.request("session/prompt", { sessionId: a }));
await refused("prompt of an unknown session", () =>
  agent.request("session/prompt", { sessionId: "nope", prompt: text("hi") }),
);
await refused("unknown method", () => agent.request("pagent/nonsense", {}));
await refused("session with an MCP server", () =>
  agent.request("session/new", {
    cwd: work,
    mcpServers: [{ name: "files", command: "/bin/true", args: [], env: [] }],
  }),
);
await prompt("A", a, "hello");

// 7. session/load replays the saved transcript
labels.set(b, "B'");
await agent.request("session/load", { sessionId: b, cwd: work, mcpServers: [] });
say(`B' loaded`);
flush("B'");
labels.set(b, "B");

// 8. a prompt while the turn runs steers it: sent while the agent waits for the permission
// of the first prompt's tool call; both prompts end when the reply to both came
let steered;
permissionAnswers.push(() => {
  say(`A prompt "and say hello" (while the turn runs)`);
  steered = agent.request("session/prompt", { sessionId: a, prompt: text("and say hello") });
  return "allow_once";
});
say(`A prompt "write the notes"`);
const first = await agent.request("session/prompt", { sessionId: a, prompt: text("write the notes") });
const second = await steered;
flush("A");
say(`A stop ${first.stopReason} and ${second.stopReason}`);
rmSync(join(work, "notes.txt"));

// 9. _session/steering (the steering convention of other agents, advertised in _meta)
say(`initialize _meta=${JSON.stringify(init._meta)}`);
const idle = await agent.request("_session/steering", {
  sessionId: a,
  prompt: text("hello"),
  _meta: { steering: { idleBehavior: "promptRequired" } },
});
say(`_session/steering on an idle session: ${idle.outcome}`);

// 10. $/cancel_request both ways: the client gives up its prompt (the SDK sends
// $/cancel_request), and the agent gives up a permission request it no longer needs
say(`A prompt "tell me a story" (then cancelled by $/cancel_request)`);
const giveUp = new AbortController();
const story2 = agent.request("session/prompt", { sessionId: a, prompt: text("tell me a story") }, { cancellationSignal: giveUp.signal });
await storyStarted();
giveUp.abort();
const gaveUp = await story2;
flush("A");
say(`A stop ${gaveUp.stopReason}`);
permissionAnswers.push(async (params, signal) => {
  await agent.notify("session/cancel", { sessionId: params.sessionId });
  await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
  return "cancelled";
});
await prompt("A", a, "write the notes");

// 11. the session lifecycle: list (titles and times), close, resume without replay, delete
const listed = await agent.request("session/list", { cwd: work });
const when = (s) => (/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/.test(s.updatedAt) ? "a time" : s.updatedAt);
for (const s of listed.sessions) say(`listed ${labels.get(s.sessionId)} title=${JSON.stringify(s.title)} updatedAt=${when(s)}`);
say(`sessionCapabilities=${JSON.stringify(init.agentCapabilities.sessionCapabilities)}`);
await agent.request("session/close", { sessionId: c });
say(`C closed`);
await refused("prompt of the closed session", () => agent.request("session/prompt", { sessionId: c, prompt: text("hello") }));
await agent.request("session/resume", { sessionId: c, cwd: work, mcpServers: [] });
say(`C resumed`);
flush("C");
await prompt("C", c, "hello");
await agent.request("session/delete", { sessionId: c });
const afterDelete = await agent.request("session/list", {});
say(`C deleted: listed=${afterDelete.sessions.some((s) => s.sessionId === c)}`);

// 12. a slash command the program registered (listed in available_commands_update)
await prompt("A", a, "/greet world");

// 13. the pickers: config options (mode, thinking), session/set_mode with its updates, logout
const d = await agent.request("session/new", { cwd: work, mcpServers: [] });
labels.set(d.sessionId, "D");
say(`D new session modes=${JSON.stringify(d.modes)}`);
const pickers = (list) => list.map((o) => `${o.id}=${o.currentValue}`).join(" ");
say(`D configOptions ${pickers(d.configOptions)}`);
const set = await agent.request("session/set_config_option", { sessionId: d.sessionId, configId: "thinking", value: "high" });
say(`D set thinking: ${pickers(set.configOptions)}`);
await agent.request("session/set_mode", { sessionId: d.sessionId, modeId: "ask" });
flush("D");
say(`D set mode ask`);
await agent.request("logout", {});
say(`logout answered`);
// The model picker: D picks the large demo model, which then answers.
const picked = await agent.request("session/set_config_option", { sessionId: d.sessionId, configId: "model", value: "pagent-demo-large" });
say(`D set model: ${pickers(picked.configOptions)}`);
await prompt("D", d.sessionId, "which model are you?");

// 14. the editor's files and terminal as the agent's tools: notes.md is a buffer of the
// editor (not on disk); the agent reads it, writes it back with a line more (the call shows
// the diff), and runs a command in the editor's terminal (the call shows the terminal)
buffers.set(join(work, "notes.md"), "# Notes\n");
permissionAnswers.push("allow_once");
await prompt("A", a, "use the editor");
say(`editor buffer notes.md = ${JSON.stringify(buffers.get(join(work, "notes.md")))}`);
say(`terminals left unreleased: ${terminals.size}`);
// A command still running when the prompt is cancelled: the agent gives its wait up, kills
// it and releases its terminal, and the prompt answers cancelled.
say(`A prompt "run a long command" (then cancelled while it runs)`);
const long = agent.request("session/prompt", { sessionId: a, prompt: text("run a long command") });
for (let i = 0; i < 2000; i++) {
  if ((pending.get("A") ?? []).some((x) => typeof x === "string" && x.includes("<terminal term-2>"))) break;
  await new Promise((r) => setTimeout(r, 10));
}
await agent.notify("session/cancel", { sessionId: a });
const longEnd = await long;
flush("A");
say(`A stop ${longEnd.stopReason}`);
say(`requests the agent gave up ($/cancel_request): ${JSON.stringify(givenUp)}`);
say(`terminals left unreleased: ${terminals.size}`);

// 15. an image and an embedded resource in a prompt reach the model as what they are
say(`A prompt with an image and a resource`);
const looked = await agent.request("session/prompt", {
  sessionId: a,
  prompt: [
    { type: "text", text: "what is this?" },
    { type: "image", mimeType: "image/png", data: "iVBORw0KGgo=" },
    { type: "resource", resource: { uri: "file:///work/a.rs", mimeType: "text/x-rust", text: "fn a() {}" } },
  ],
});
flush("A");
say(`A stop ${looked.stopReason}`);

// 16. a question of a tool for the user (elicitation/create, a form): answered in the editor
await prompt("A", a, "ask me my name");

// 17. the client goes: the agent ends
connection.close();
agentProcess.stdin.end();
const code = await exited;
say(`agent exited ${code}`);
clearTimeout(deadline);
rmSync(work, { recursive: true, force: true });
console.error(`schema: ${checked} lines of the agent checked`);
say(`every line the agent wrote is valid: ${invalid.length === 0}`);
for (const line of invalid) say(line);
console.log(out.join("\n"));
