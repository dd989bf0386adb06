/**
 * Isolation, pause, resume, snapshots and forks through the SDK against a real `lbb serve`
 * (the harness's server: default isolation ns, gvisor offered beside it when runsc is
 * installed). On gvisor: pause keeps a process's memory across resume, a snapshot leaves the
 * sandbox running, a fork starts from the snapshot's memory and files and then goes its own
 * way. On ns: pause and resume by the freezer; snapshot and fork answer 409 not_supported as a
 * typed error. The gvisor tests skip, and say why, when /usr/local/lib/lbb/runsc is missing.
 */

import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { test, type TestContext } from "node:test";
import { fileURLToPath } from "node:url";

import {
  ConflictError,
  IdempotencyConflictError,
  InvalidRequestError,
  IsolationUnavailableError,
  LbbClient,
  NotFoundError,
  NotSupportedError,
  Sandbox,
  outputText,
} from "@littlebigbrain/client";

import { testServer } from "./server-env.js";

const RUNSC = "/usr/local/lib/lbb/runsc";

function client(t: TestContext): LbbClient | undefined {
  const s = testServer(t);
  return s && new LbbClient({ baseUrl: s.url, apiKey: s.key, graph: "main" });
}

/** The client when this host has gvisor, else undefined after marking the test skipped. */
function gvisorClient(t: TestContext): LbbClient | undefined {
  const lbb = client(t);
  if (lbb && !existsSync(RUNSC)) {
    t.skip(`RequiresGvisor: memory snapshots and forks need gvisor, and ${RUNSC} is missing`);
    return undefined;
  }
  return lbb;
}

async function gvisorSandbox(lbb: LbbClient, metadata?: Record<string, string>): Promise<Sandbox> {
  try {
    return await lbb.sandboxes.create({ isolation: "gvisor", expiresInSeconds: 600, ...(metadata ? { metadata } : {}) });
  } catch (e) {
    if (e instanceof IsolationUnavailableError) throw new Error(`${RUNSC} is installed but the server cannot run gvisor: ${e.message}`);
    throw e;
  }
}

// holder.py (sdk/testdata, shared with the Python suite): a process that keeps its state in
// memory only; see its comment.
const HOLDER = readFileSync(join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "testdata", "holder.py"), "utf8"); // from dist/test

interface State {
  token: string;
  n: number;
  note: string;
}

async function readState(sb: Sandbox): Promise<State | undefined> {
  let text: string;
  try {
    text = await sb.files.readText("state");
  } catch (e) {
    if (e instanceof NotFoundError) return undefined;
    throw e;
  }
  const f = text.trim().split(/\s+/);
  if (f.length < 3) return undefined;
  return { token: f[0]!, n: Number(f[1]), note: f[3] ?? "" };
}

async function waitFor<T>(what: string, fn: () => Promise<T | undefined | false>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs / 1000} s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** Starts the holder in the background: the command that starts it ends at once, so no command runs. */
async function startHolder(sb: Sandbox): Promise<State> {
  await sb.files.write("holder.py", HOLDER);
  const cmd = await sb.commands.run({ argv: ["sh", "-c", "setsid python3 /workspace/holder.py </dev/null >/dev/null 2>&1 &"] });
  assert.equal(cmd.exitCode, 0);
  return waitFor("the holder's first state", () => readState(sb));
}

/** Waits until the holder counted past was; fails when it is another process. */
async function carriesOn(sb: Sandbox, was: State, what: string): Promise<State> {
  const st = await waitFor(`${what}: the holder counting on`, async () => {
    const s = await readState(sb);
    return s && (s.token !== was.token || s.n > was.n + 5) ? s : undefined;
  });
  assert.equal(st.token, was.token, `${what}: the holder is ${JSON.stringify(st)}, was ${JSON.stringify(was)}: started again, its memory lost`);
  return st;
}

test("isolation on runs, templates and sandboxes", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  const run = await lbb.sandboxes.run({ code: "def run(input, config):\n    return input", input: 1, isolation: "ns" });
  assert.deepEqual([run.ok, run.result, run.isolation], [true, 1, "ns"]);
  const name = `iso-${randomUUID().slice(0, 8)}`;
  const tpl = await lbb.sandboxes.templates.create({ name, code: "def run(input, config):\n    return 2", isolation: "ns" });
  assert.equal(tpl.isolation, "ns");
  const got = await lbb.sandboxes.templates.get(name);
  assert.equal(got.isolation, "ns");
  assert.deepEqual(got.versions?.map((v) => v.isolation), ["ns"]);
  await lbb.sandboxes.scoped({ template: name, isolation: "ns" }, async (sb) => {
    assert.equal(sb.info.isolation, "ns");
    assert.equal((await sb.refresh()).isolation, "ns");
  });
  // The server default (ns here) when neither the call nor the template names one.
  await lbb.sandboxes.scoped({}, async (sb) => assert.equal(sb.info.isolation, "ns"));
  for (const call of [
    () => lbb.sandboxes.run({ code: "x", isolation: "firecracker" }),
    () => lbb.sandboxes.create({ isolation: "firecracker" }),
    () => lbb.sandboxes.templates.create({ name, code: "x", isolation: "firecracker" }),
  ]) {
    await assert.rejects(call(), (e: unknown) => e instanceof InvalidRequestError && e.status === 400 && e.code === "invalid_request");
  }
});

test("isolation_unavailable is a typed error", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  // A driver lbb knows but this server does not offer: gvisor where runsc is missing, else
  // "local" (the no-isolation dev driver, offered only when it is the server's default).
  const unavailable = (existsSync(RUNSC) ? "local" : "gvisor") as "gvisor";
  await assert.rejects(
    lbb.sandboxes.create({ isolation: unavailable }),
    (e: unknown) => e instanceof IsolationUnavailableError && e instanceof InvalidRequestError && e.status === 400 && e.code === "isolation_unavailable",
  );
});

test("ns: pause and resume by the freezer; snapshot and fork are not_supported", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  const sb = await lbb.sandboxes.create({ isolation: "ns", expiresInSeconds: 300 });
  try {
    assert.equal(sb.info.isolation, "ns");
    const st = await startHolder(sb);
    for (const [what, call] of [["snapshot", () => sb.snapshot()], ["fork", () => sb.fork()]] as const) {
      await assert.rejects(call(), (e: unknown) => {
        assert.ok(e instanceof NotSupportedError && e instanceof ConflictError, `${what}: ${String(e)}`);
        assert.deepEqual([e.status, e.code], [409, "not_supported"]);
        assert.ok(e.requestId);
        assert.ok(e.message.includes('memory snapshots need isolation "gvisor"') && e.message.includes(sb.id), e.message);
        return true;
      });
    }
    assert.deepEqual((await sb.snapshots()).data, []);

    const paused = await sb.pause();
    assert.deepEqual([paused.status, sb.status], ["paused", "paused"]);
    assert.ok(paused.pausedAt);
    assert.equal((await sb.refresh()).status, "paused");
    assert.equal((await sb.pause()).status, "paused", "a repeated pause answers the paused sandbox");
    const resumed = await sb.resume();
    assert.deepEqual([resumed.status, resumed.pausedAt], ["running", undefined]);
    await carriesOn(sb, st, "after the thaw");

    // Pause never breaks a running command: it is frozen with the sandbox and runs on after
    // the resume (issue 22; it used to answer 409 commands_running).
    const cmd = await sb.commands.create({ argv: ["sleep", "60"] });
    assert.equal((await sb.pause()).status, "paused");
    assert.equal((await sb.commands.get(cmd.id)).status, "running");
    assert.equal((await sb.resume()).status, "running");
    assert.equal((await sb.commands.get(cmd.id)).status, "running");
    await sb.commands.kill(cmd.id);
  } finally {
    await sb.delete();
  }
  await assert.rejects(sb.pause(), (e: unknown) => e instanceof ConflictError && e.code === "conflict");
});

test("gvisor: pause keeps memory; a snapshot runs on; forks start from it", async (t) => {
  const lbb = gvisorClient(t);
  if (!lbb) return;
  const sb = await gvisorSandbox(lbb, { suite: "ts-snap" });
  const forks: Sandbox[] = [];
  let fresh = "";
  try {
    assert.equal(sb.info.isolation, "gvisor");
    let st = await startHolder(sb);

    // A command still running: a pause freezes it and a snapshot carries it on (issue 22;
    // both used to answer 409 commands_running), and the command lives on.
    const cmd = await sb.commands.create({ argv: ["sleep", "60"] });
    assert.equal((await sb.pause()).status, "paused");
    assert.equal((await sb.resume()).status, "running");
    await lbb.snapshots.delete((await sb.snapshot()).id); // taken with the command running; not kept
    assert.equal((await sb.commands.get(cmd.id)).status, "running");
    await sb.commands.kill(cmd.id);
    await sb.commands.wait(cmd.id, { timeoutMs: 30_000 });

    // Pause: saved with its memory; resume: the same process carries on.
    st = await carriesOn(sb, st, "before the pause");
    const paused = await sb.pause();
    assert.deepEqual([paused.status, paused.isolation], ["paused", "gvisor"]);
    assert.ok(paused.pausedAt);
    await assert.rejects(sb.snapshot(), ConflictError); // not running
    const resumed = await sb.resume();
    assert.deepEqual([resumed.status, resumed.pausedAt], ["running", undefined]);
    st = await carriesOn(sb, st, "after the resume");

    // A snapshot; the sandbox runs on, the same process.
    await sb.files.write("kept.txt", "from the source");
    const snap = await sb.snapshot({ metadata: { step: "1" } });
    assert.match(snap.id, /^snp_/);
    assert.deepEqual([snap.sandbox, snap.isolation, snap.memory, snap.metadata], [sb.id, "gvisor", true, { step: "1" }]);
    assert.ok(snap.sizeBytes > 0 && snap.durationMs > 0 && snap.createdAt, JSON.stringify(snap.raw));
    const atSnap = await carriesOn(sb, st, "after the snapshot");
    await sb.files.write("after.txt", "written after the snapshot");

    // A fork of it: the snapshot's memory and files, then its own way.
    const fork = await sb.fork({ snapshot: snap.id, metadata: { fork: "1" }, env: { FORK_VAR: "one" } });
    forks.push(fork);
    assert.ok(fork instanceof Sandbox);
    assert.notEqual(fork.id, sb.id);
    assert.deepEqual([fork.status, fork.info.isolation, fork.info.metadata], ["running", "gvisor", { fork: "1" }]);
    assert.deepEqual(fork.info.forkedFrom, { sandbox: sb.id, snapshot: snap.id });
    const fst = await carriesOn(fork, atSnap, "in the fork");
    assert.equal(await fork.files.readText("kept.txt"), "from the source");
    await assert.rejects(fork.files.read("after.txt"), NotFoundError); // written in the source after the snapshot
    assert.equal(outputText((await fork.commands.run({ argv: ["sh", "-c", "echo $FORK_VAR"] })).stdout).trim(), "one");
    await fork.files.write("note.in", "fork-only");
    await waitFor("the fork's holder taking its note", async () => (await readState(fork))?.note === "fork-only");
    assert.equal((await readState(sb))?.note, "", "the note of the fork reached the source");

    // A fork without a snapshot takes a fresh one, kept under the source.
    const fork2 = await sb.fork();
    forks.push(fork2);
    fresh = fork2.info.forkedFrom?.snapshot ?? "";
    assert.ok(fresh && fresh !== snap.id, JSON.stringify(fork2.info.forkedFrom));
    await carriesOn(fork2, atSnap, "in the second fork");
    const listed = await sb.snapshots();
    assert.deepEqual(listed.data.map((s) => s.id), [fresh, snap.id], "newest first");
    assert.deepEqual((await sb.snapshots({ limit: 1 })).data.map((s) => s.id), [fresh]);
    assert.deepEqual((await lbb.snapshots.list(sb.id)).data.map((s) => s.id), [fresh, snap.id]);

    // Get and delete by id; forks made from a deleted snapshot run on.
    assert.deepEqual((await lbb.snapshots.get(snap.id)).raw, snap.raw);
    assert.equal((await lbb.snapshots.delete(snap.id)).id, snap.id);
    await assert.rejects(lbb.snapshots.get(snap.id), NotFoundError);
    assert.deepEqual((await sb.snapshots()).data.map((s) => s.id), [fresh]);
    await assert.rejects(sb.fork({ snapshot: snap.id }), NotFoundError);
    assert.equal((await fork.refresh()).status, "running");
    await carriesOn(fork, fst, "the fork after its snapshot was deleted");
  } finally {
    for (const f of forks) await f.delete();
    await sb.delete();
  }
  // A sandbox's snapshots go with it.
  await assert.rejects(lbb.snapshots.get(fresh), NotFoundError);
});

test("gvisor: a fork's Idempotency-Key", async (t) => {
  const lbb = gvisorClient(t);
  if (!lbb) return;
  const sb = await gvisorSandbox(lbb);
  try {
    const snap = await sb.snapshot();
    const key = `fork-${randomUUID()}`;
    const a = await sb.fork({ snapshot: snap.id, idempotencyKey: key });
    try {
      const b = await sb.fork({ snapshot: snap.id, idempotencyKey: key });
      assert.equal(a.id, b.id, "a retry with the same key answers the same fork");
      await assert.rejects(sb.fork({ snapshot: snap.id, metadata: { other: "request" }, idempotencyKey: key }), IdempotencyConflictError);
    } finally {
      await a.delete();
    }
  } finally {
    await sb.delete();
  }
});
