/**
 * The SDK against a real `lbb serve` with the real driver: Level 1, 2 and 3 beyond the seed's
 * samples, errors, idempotency, streams, and the OpenAPI document the wire types follow.
 * Written to DESIGN.md section 4: a test of a route the server does not serve yet fails.
 */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { test } from "node:test";

import {
  AuthenticationError,
  ConflictError,
  IdempotencyConflictError,
  InvalidRequestError,
  LbbClient,
  NotFoundError,
  PathOutsideWorkspaceError,
  outputText,
} from "@littlebigbrain/client";

import { testServer } from "./server-env.js";

const SUM = "def run(input, config):\n    return sum(input)";

function client(t: import("node:test").TestContext): LbbClient | undefined {
  const s = testServer(t);
  return s && new LbbClient({ baseUrl: s.url, apiKey: s.key, graph: "main" });
}

test("a one-call run answers the documented fields", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  const run = await lbb.sandboxes.run<number>({ code: SUM, input: [1, 2, 3] });
  const required: string[] = ((await lbb.openapi()) as OpenAPI).components?.schemas?.RunResult?.required ?? [];
  assert.ok(required.length > 0, "the document's RunResult has required fields");
  for (const f of required) assert.ok(f in run.raw, `the answer has no ${f}`);
  assert.deepEqual([run.ok, run.result, run.status, run.exitCode], [true, 6, "succeeded", 0]);
  assert.match(run.command, /^cmd_/);
  assert.match(run.sandbox, /^sbx_/);
  assert.equal(typeof run.stdout.bytes, "number");
  assert.equal((await lbb.sandboxes.get(run.sandbox)).info.status, "destroyed");
  assert.equal((await lbb.commands.get(run.command)).status, "succeeded");
});

test("printing, config, a run that raises, node and shell", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  const p = await lbb.sandboxes.run({ code: "def run(input, config):\n    print('hello', input)\n    return config", input: 3, config: { unit: "cm" } });
  assert.deepEqual(p.result, { unit: "cm" });
  assert.match(outputText(p.stdout), /hello 3/);
  const bad = await lbb.sandboxes.run({ code: "def run(input, config):\n    raise ValueError('bad input')" });
  assert.equal(bad.ok, false);
  assert.match(outputText(bad.stderr), /ValueError: bad input/);
  const node = await lbb.sandboxes.run({ code: "function run(input) { return input.map((x) => x * 2); }", input: [1, 2], language: "node" });
  assert.deepEqual(node.result, [2, 4]);
  const sh = await lbb.sandboxes.run({ code: 'jq add > "$LBB_RESULT"', input: [1, 2, 3], base: "lbb/shell" });
  assert.equal(sh.result, 6);
});

test("past waitMs the SDK waits on the command", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  const code = "import time\ndef run(input, config):\n    time.sleep(1.5)\n    return 'late'";
  const early = await lbb.sandboxes.run({ code, waitMs: 0, wait: false });
  assert.ok(["queued", "running"].includes(early.status), early.status);
  assert.equal((await lbb.commands.wait(early.command)).result, "late");
  assert.equal((await lbb.sandboxes.run({ code, waitMs: 0 })).result, "late");
});

test("the same key runs the code once; another request with it is refused", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  const key = `test-${randomUUID()}`;
  const code = "import random\ndef run(input, config):\n    return random.random()";
  const a = await lbb.sandboxes.run({ code, idempotencyKey: key });
  const b = await lbb.sandboxes.run({ code, idempotencyKey: key });
  assert.equal(a.command, b.command);
  assert.equal(a.result, b.result);
  await assert.rejects(lbb.sandboxes.run({ code: code + "\n", idempotencyKey: key }), (e: unknown) => e instanceof IdempotencyConflictError && e.status === 422 && !!e.requestId);
});

test("errors are typed", async (t) => {
  const s = testServer(t);
  if (!s) return;
  const lbb = new LbbClient({ baseUrl: s.url, apiKey: s.key });
  await assert.rejects(lbb.commands.get("cmd_01aaaaaaaaaaaaaaaaaaaaaaaa"), (e: unknown) => e instanceof NotFoundError && e.code === "not_found" && /^req_/.test(e.requestId ?? ""));
  await assert.rejects(lbb.sandboxes.run({ code: SUM, limits: { memoryMib: 2 ** 30 } }), InvalidRequestError);
  await assert.rejects(new LbbClient({ baseUrl: s.url, apiKey: "lbb_sk_wrong" }).sandboxes.run({ code: SUM }), AuthenticationError);
  await assert.rejects(lbb.sandboxes.run({ template: `no-such-${randomUUID().slice(0, 8)}` }), NotFoundError);
});

test("templates: versions, pins, config merge", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  const name = `t-${randomUUID().slice(0, 10)}`;
  const v1 = await lbb.sandboxes.templates.create({ name, code: "def run(input, config):\n    return ['v1', config]", config: { unit: "cm" } });
  const v2 = await lbb.sandboxes.templates.create({ name, code: "def run(input, config):\n    return ['v2', config]", config: { unit: "cm" }, commandTimeoutMs: 30_000 });
  assert.deepEqual([v1.version, v2.version, v1.id === v2.id, v2.timeoutMs], [1, 2, true, 30_000]);
  assert.deepEqual((await lbb.sandboxes.run({ template: name })).result, ["v2", { unit: "cm" }]);
  assert.deepEqual((await lbb.sandboxes.run({ template: `${name}@1`, config: { extra: 1 } })).result, ["v1", { unit: "cm", extra: 1 }]);
  const got = await lbb.sandboxes.templates.get(name);
  assert.deepEqual(got.versions?.map((v) => v.version).sort(), [1, 2]);
  assert.ok((await lbb.sandboxes.templates.list()).data.some((x) => x.name === name));
});

test("Level 3: files, commands, stop and resume keep the disk, paths stay inside", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  const sb = await lbb.sandboxes.create({ expiresInSeconds: 300 });
  try {
    assert.match(sb.id, /^sbx_/);
    await sb.files.write("dir/a.bin", new Uint8Array([0, 1, 2, 255]));
    assert.deepEqual(await sb.files.read("dir/a.bin"), new Uint8Array([0, 1, 2, 255]));
    const { data } = await sb.files.list("dir");
    assert.ok(data.some((e) => e.path.endsWith("a.bin") && e.type === "file" && e.size === 4), JSON.stringify(data));
    const cmd = await sb.commands.create({ argv: ["bash", "-c", "echo out; echo err >&2; exit 3"], waitMs: 30_000 });
    assert.deepEqual([cmd.status, cmd.exitCode], ["failed", 3]);
    assert.match(outputText(cmd.stdout), /out/);
    assert.match(outputText(cmd.stderr), /err/);
    const cat = await sb.commands.run({ argv: ["cat"], stdin: "piped" });
    assert.equal(outputText(cat.stdout), "piped");
    await sb.stop();
    assert.equal((await sb.refresh()).status, "stopped");
    await sb.resume();
    assert.deepEqual(await sb.files.read("dir/a.bin"), new Uint8Array([0, 1, 2, 255]));
    await assert.rejects(sb.files.read("../../etc/passwd"), PathOutsideWorkspaceError);
    const r = await sb.run<number>({ code: "def run(input, config):\n    return len(open('dir/a.bin', 'rb').read()) + input", input: 1 });
    assert.equal(r.result, 5);
  } finally {
    await sb.delete();
  }
  assert.equal((await lbb.sandboxes.get(sb.id)).info.status, "destroyed");
});

test("scoped deletes the sandbox after an error", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  let id = "";
  await assert.rejects(
    lbb.sandboxes.scoped({}, async (sb) => {
      id = sb.id;
      throw new Error("in the block");
    }),
    /in the block/,
  );
  assert.equal((await lbb.sandboxes.get(id)).info.status, "destroyed");
});

test("output streams as server-sent events", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  await lbb.sandboxes.scoped({}, async (sb) => {
    const cmd = await sb.commands.create({ argv: ["bash", "-c", "for i in 1 2 3; do echo line$i; sleep 0.2; done"] });
    // Chunks, then an exit event (issue 4); whatever the events are named, the chunks' text joins to the output.
    const control = new Set(["exit", "end", "done", "error", "status", "ping", "keepalive"]);
    let text = "";
    for await (const ev of lbb.commands.stream(cmd.id)) if (!control.has(ev.event)) text += ev.text;
    assert.equal(text.replace(/\r/g, ""), "line1\nline2\nline3\n");
    assert.equal((await lbb.commands.wait(cmd.id)).exitCode, 0);
  });
});

test("files: mkdir makes parents; delete of a non-empty directory needs recursive", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  await lbb.sandboxes.scoped({}, async (sb) => {
    const d = await sb.files.mkdir("a/b/c");
    assert.equal(d.type, "dir");
    assert.match(d.path, /a\/b\/c$/);
    await sb.files.write("a/b/c/f.txt", "x");
    await assert.rejects(sb.files.delete("a"), ConflictError);
    assert.equal(await sb.files.readText("a/b/c/f.txt"), "x");
    await sb.files.delete("a", { recursive: true });
    assert.ok(!(await sb.files.list(".")).data.some((e) => e.name === "a"));
    await assert.rejects(sb.files.read("a/b/c/f.txt"), NotFoundError);
  });
});

test("commands: stdinOpen, writeStdin, close", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  await lbb.sandboxes.scoped({}, async (sb) => {
    const cmd = await sb.commands.create({ argv: ["cat"], stdinOpen: true });
    assert.equal(cmd.status, "running");
    const w1 = await sb.commands.writeStdin(cmd.id, "hello ");
    assert.deepEqual([w1.bytes, w1.total, w1.closed], [6, 6, false]);
    const w2 = await lbb.commands.writeStdin(cmd.id, new TextEncoder().encode("world"), { close: true });
    assert.deepEqual([w2.bytes, w2.total, w2.closed], [5, 11, true]);
    const done = await lbb.commands.wait(cmd.id, { timeoutMs: 60_000 });
    assert.equal(done.status, "succeeded");
    assert.equal(outputText(done.stdout), "hello world");
    await assert.rejects(lbb.commands.writeStdin(cmd.id, "late"), ConflictError);
    // A command started without stdinOpen takes no writes.
    const other = await sb.commands.create({ argv: ["sleep", "30"] });
    await assert.rejects(sb.commands.writeStdin(other.id, "x"), ConflictError);
    await sb.commands.kill(other.id);
  });
});

test("sandboxes.list filters by status and label", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  const tag = randomUUID().slice(0, 10);
  await lbb.sandboxes.scoped({ metadata: { suite: tag, kind: "a" } }, (a) =>
    lbb.sandboxes.scoped({ metadata: { suite: tag, kind: "b" } }, async (b) => {
      const ids = async (p: Parameters<typeof lbb.sandboxes.list>[0]) => (await lbb.sandboxes.list(p)).data.map((s) => s.id).sort();
      assert.deepEqual(await ids({ label: { suite: tag } }), [a.id, b.id].sort());
      assert.deepEqual(await ids({ label: [`suite=${tag}`, "kind=b"] }), [b.id]);
      assert.deepEqual(await ids({ label: `suite=${tag}-none` }), []);
      await a.stop();
      assert.deepEqual(await ids({ status: "stopped", label: { suite: tag } }), [a.id]);
      assert.deepEqual(await ids({ status: "running", label: { suite: tag } }), [b.id]);
      await assert.rejects(lbb.sandboxes.list({ label: "no-equals-sign" }), InvalidRequestError);
    }),
  );
});

type OpenAPI = { paths?: Record<string, Record<string, any>>; components?: { schemas?: Record<string, any> } };

test("files: delete, and the graph's quotas follow", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  const before = await lbb.quotas();
  assert.equal(before.graph, "main");
  assert.equal(before.maxResultBytes, 1 << 20);
  assert.equal(before.quotas.files!.unit, "count");
  const data = randomUUID().repeat(3);
  const f = await lbb.files.upload(data, { name: "q.txt" });
  const after = await lbb.quotas();
  assert.equal(after.quotas.files!.usage, before.quotas.files!.usage + 1);
  assert.equal(after.quotas.file_bytes!.usage, before.quotas.file_bytes!.usage + data.length);
  const gone = await lbb.files.delete(f.id);
  assert.equal(gone.id, f.id);
  await assert.rejects(lbb.files.get(f.id), NotFoundError);
  await assert.rejects(lbb.files.delete(f.id), NotFoundError);
  assert.equal((await lbb.quotas()).quotas.files!.usage, before.quotas.files!.usage);
});

test("openapi: every route the SDK calls is in the document", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  const paths = ((await lbb.openapi()) as OpenAPI).paths ?? {};
  const used: [string, string][] = [
    ["post", "/v1/sandboxes"], ["get", "/v1/sandboxes"], ["get", "/v1/sandboxes/{id}"], ["delete", "/v1/sandboxes/{id}"],
    ["post", "/v1/sandboxes/{id}/stop"], ["post", "/v1/sandboxes/{id}/resume"], ["post", "/v1/sandboxes/{id}/run"],
    ["post", "/v1/sandboxes/{id}/commands"], ["get", "/v1/sandboxes/{id}/commands"], ["get", "/v1/commands"], ["get", "/v1/commands/{id}"],
    ["get", "/v1/commands/{id}/output"], ["post", "/v1/commands/{id}/kill"],
    ["put", "/v1/sandboxes/{id}/files/content"], ["get", "/v1/sandboxes/{id}/files/content"],
    ["get", "/v1/sandboxes/{id}/files"], ["delete", "/v1/sandboxes/{id}/files"],
    ["post", "/v1/sandboxes/{id}/files/mkdir"], ["post", "/v1/commands/{id}/stdin"],
    ["post", "/v1/sandboxes/templates"], ["get", "/v1/sandboxes/templates"], ["get", "/v1/sandboxes/templates/{name}"],
    ["post", "/v1/files"], ["get", "/v1/files"], ["get", "/v1/files/{id}"], ["get", "/v1/files/{id}/content"],
    ["put", "/v1/sandboxes/files/content"], ["delete", "/v1/files/{id}"], ["get", "/v1/quotas"],
    ["post", "/v1/sandboxes/{id}/pause"], ["post", "/v1/sandboxes/{id}/snapshot"], ["get", "/v1/sandboxes/{id}/snapshots"],
    ["post", "/v1/sandboxes/{id}/fork"], ["get", "/v1/snapshots/{id}"], ["delete", "/v1/snapshots/{id}"],
  ];
  const missing = used.filter(([m, p]) => !paths[p]?.[m]).map(([m, p]) => `${m.toUpperCase()} ${p}`);
  assert.deepEqual(missing, [], "routes the SDK calls that /v1/openapi.json does not have");
});

// The document src/openapi.ts (and so src/wire.ts) is generated from.
const documentPath = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "..", "internal", "api", "openapi.json");

test("openapi: the server serves the schemas the wire types are generated from", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  const served = (await lbb.openapi()) as OpenAPI;
  const file = JSON.parse(readFileSync(documentPath, "utf8")) as OpenAPI;
  assert.deepEqual(served.components?.schemas, file.components?.schemas, "GET /v1/openapi.json against internal/api/openapi.json");
});

test("openapi: each route the SDK calls answers (and takes) the schema of its wire type", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  const doc = (await lbb.openapi()) as OpenAPI;
  // The schemas a response or request body names, however nested (oneOf, allOf, items).
  const refs = (s: unknown): string[] =>
    s && typeof s === "object"
      ? Object.entries(s).flatMap(([k, v]) => (k === "$ref" ? [String(v).split("/").pop()!] : refs(v)))
      : [];
  const at = (method: string, path: string, status: string) => {
    const op = doc.paths?.[path]?.[method];
    return status === "body" ? op?.requestBody?.content?.["application/json"]?.schema : op?.responses?.[status]?.content?.["application/json"]?.schema;
  };
  // [method, path, status or "body", the schema src/wire.ts reads or sends there]
  const checks: [string, string, string, string][] = [
    ["post", "/v1/sandboxes", "200", "RunResult"],
    ["post", "/v1/sandboxes", "201", "Sandbox"],
    ["post", "/v1/sandboxes", "body", "CreateSandboxRequest"],
    ["get", "/v1/commands/{id}", "200", "Command"],
    ["get", "/v1/sandboxes/{id}", "200", "Sandbox"],
    ["post", "/v1/sandboxes/templates", "201", "Template"],
    ["post", "/v1/sandboxes/templates", "body", "TemplateRequest"],
    ["get", "/v1/sandboxes/templates/{name}", "200", "Template"],
    ["get", "/v1/sandboxes/templates/{name}", "200", "TemplateVersion"],
    ["post", "/v1/sandboxes/{id}/pause", "200", "Sandbox"],
    ["post", "/v1/sandboxes/{id}/resume", "200", "Sandbox"],
    ["post", "/v1/sandboxes/{id}/fork", "201", "Sandbox"],
    ["post", "/v1/sandboxes/{id}/fork", "body", "ForkRequest"],
    ["post", "/v1/sandboxes/{id}/snapshot", "201", "Snapshot"],
    ["post", "/v1/sandboxes/{id}/snapshot", "body", "SnapshotRequest"],
    ["get", "/v1/snapshots/{id}", "200", "Snapshot"],
    ["delete", "/v1/snapshots/{id}", "200", "Snapshot"],
    ["get", "/v1/sandboxes/{id}/snapshots", "200", "SnapshotList"],
    ["get", "/v1/sandboxes/{id}/files", "200", "FileEntryList"],
    ["get", "/v1/files/{id}", "200", "File"],
    ["delete", "/v1/files/{id}", "200", "File"],
    ["get", "/v1/quotas", "200", "Quotas"],
  ];
  const wrong = checks.filter(([m, p, st, name]) => !refs(at(m, p, st)).includes(name)).map(([m, p, st, name]) => `${m.toUpperCase()} ${p} ${st}: ${name}`);
  assert.deepEqual(wrong, [], "routes whose schema in /v1/openapi.json is not the one the SDK's wire type is");
});

test("a preview URL reaches a server in the sandbox; a tampered one is 404", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  const sb = await lbb.sandboxes.create({ expiresInSeconds: 300 });
  try {
    await sb.files.write("www/index.html", "<p>hello preview</p>");
    await sb.commands.create({ argv: ["bash", "-c", "cd www && (python3 -m http.server 8000 >/dev/null 2>&1 &)"], waitMs: 30_000 });
    const p = await sb.previewUrl(8000, { expiresInSeconds: 120 });
    assert.equal(p.port, 8000);
    const u = new URL(p.url);
    assert.match(u.hostname, /\.preview\.localhost$/);
    // *.localhost is the machine itself; Node's fetch is told so with the Host header.
    const get = async (host: string) => {
      const { request } = await import("node:http");
      return await new Promise<{ status: number; body: string }>((ok, fail) => {
        const req = request({ host: "127.0.0.1", port: Number(u.port), path: "/", headers: { host: `${host}:${u.port}` } }, (res) => {
          let body = "";
          res.on("data", (c) => (body += c));
          res.on("end", () => ok({ status: res.statusCode ?? 0, body }));
        });
        req.on("error", fail);
        req.end();
      });
    };
    let r = await get(u.hostname);
    for (let i = 0; i < 100 && r.status !== 200; i++) {
      await new Promise((ok) => setTimeout(ok, 200));
      r = await get(u.hostname);
    }
    assert.equal(r.status, 200);
    assert.match(r.body, /hello preview/);
    const label = u.hostname.split(".")[0]!;
    const tampered = label.slice(0, -1) + (label.endsWith("a") ? "b" : "a");
    assert.equal((await get(u.hostname.replace(label, tampered))).status, 404);
  } finally {
    await sb.delete();
  }
});
