/**
 * Isolation, pause, resume, snapshots and forks against a scripted local server: the requests
 * the client sends and the values it reads back. No lbb server needed.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { CommandsRunningError, ConflictError, LbbClient, NotSupportedError, Sandbox, type Snapshot } from "@littlebigbrain/client";

import { error, withServer, type Reply, type Seen } from "./fake-server.js";

const SBX = { id: "sbx_01src", graph: "main", status: "running", isolation: "gvisor" };
const SNAP = {
  id: "snp_01a",
  graph: "main",
  sandbox: "sbx_01src",
  isolation: "gvisor",
  memory: true,
  size_bytes: 123,
  created_at: "2030-01-01T00:00:00Z",
  duration_ms: 152.3,
  metadata: { step: "1" },
};
const FORK = { ...SBX, id: "sbx_01fork", forked_from: { sandbox: "sbx_01src", snapshot: "snp_01a" } };

function handler(seen: Seen): Reply {
  const { method: m, path: p } = seen;
  if (m === "POST" && p === "/v1/sandboxes") {
    const body = seen.json();
    if (body.run) return { status: 200, body: { ok: true, result: 1, command: "cmd_01r", sandbox: "sbx_01r", status: "succeeded", isolation: body.run.isolation } };
    return { status: 201, body: { ...SBX, isolation: body.isolation ?? "ns" } };
  }
  if (m === "POST" && p === "/v1/sandboxes/templates") {
    return { status: 201, body: { id: "sbt_01", name: "t", version: 1, base: "lbb/python", isolation: seen.json().isolation, versions: [{ version: 1, created_at: "x", isolation: "gvisor" }] } };
  }
  if (m === "POST" && p === "/v1/sandboxes/sbx_01src/pause") return { body: { ...SBX, status: "paused", paused_at: "2030-01-01T00:00:01Z" } };
  if (m === "POST" && p === "/v1/sandboxes/sbx_01src/resume") return { body: SBX };
  if (m === "POST" && p === "/v1/sandboxes/sbx_01src/snapshot") return { status: 201, body: SNAP };
  if (m === "POST" && p === "/v1/sandboxes/sbx_01src/fork") return { status: 201, body: FORK };
  if (m === "GET" && p === "/v1/sandboxes/sbx_01src/snapshots") return { body: { snapshots: [SNAP], next_cursor: "c2" } };
  if (p === "/v1/snapshots/snp_01a") return { body: SNAP };
  if (p === "/v1/sandboxes/sbx_01ns/snapshot") return error(409, "not_supported", 'memory snapshots need isolation "gvisor"; sandbox sbx_01ns runs on "ns"');
  if (p === "/v1/sandboxes/sbx_01ns/pause") return error(409, "commands_running");
  if (m === "GET" && p === "/v1/sandboxes/sbx_01ns") return { body: { id: "sbx_01ns", status: "running", isolation: "ns" } };
  return error(404, "not_found");
}

function checkSnapshot(s: Snapshot): void {
  assert.deepEqual(
    [s.id, s.sandbox, s.isolation, s.memory, s.sizeBytes, s.durationMs, s.createdAt, s.metadata],
    ["snp_01a", "sbx_01src", "gvisor", true, 123, 152.3, "2030-01-01T00:00:00Z", { step: "1" }],
  );
  assert.equal(s.raw.size_bytes, 123);
}

test("isolation, pause, resume, snapshot, fork, snapshots", async () => {
  await withServer(handler, async (srv) => {
    const lbb = new LbbClient({ baseUrl: srv.url, apiKey: "k" });
    const sb = await lbb.sandboxes.create({ isolation: "gvisor", expiresInSeconds: 60 });
    assert.equal(sb.info.isolation, "gvisor");
    assert.equal(sb.info.pausedAt, undefined);
    assert.equal(sb.info.forkedFrom, undefined);
    assert.equal((await lbb.sandboxes.run({ code: "x", isolation: "gvisor" })).isolation, "gvisor");
    const tpl = await lbb.sandboxes.templates.create({ name: "t", code: "x", isolation: "gvisor" });
    assert.equal(tpl.isolation, "gvisor");
    assert.equal(tpl.versions?.[0]?.isolation, "gvisor");

    const paused = await sb.pause();
    assert.deepEqual([paused.status, sb.status, paused.pausedAt], ["paused", "paused", "2030-01-01T00:00:01Z"]);
    const resumed = await sb.resume();
    assert.deepEqual([resumed.status, resumed.pausedAt], ["running", undefined]);

    checkSnapshot(await sb.snapshot());
    checkSnapshot(await sb.snapshot({ metadata: { step: "1" } }));
    const fork = await sb.fork();
    assert.ok(fork instanceof Sandbox);
    assert.equal(fork.id, "sbx_01fork");
    assert.deepEqual(fork.info.forkedFrom, { sandbox: "sbx_01src", snapshot: "snp_01a" });
    await sb.fork({ snapshot: "snp_01a", metadata: { a: "b" }, expiresInSeconds: 600, env: { K: "v" }, idempotencyKey: "fork-1" });

    const page = await sb.snapshots({ limit: 5 });
    assert.deepEqual([page.data.map((s) => s.id), page.nextCursor], [["snp_01a"], "c2"]);
    checkSnapshot(page.data[0]!);
    assert.deepEqual((await lbb.snapshots.list("sbx_01src")).data.map((s) => s.id), ["snp_01a"]);
    checkSnapshot(await lbb.snapshots.get("snp_01a"));
    checkSnapshot(await lbb.snapshots.delete("snp_01a"));

    // The requests, in snake_case.
    const creates = srv.requests("POST", "/v1/sandboxes");
    assert.deepEqual(creates[0]!.json(), { isolation: "gvisor", expires_in_seconds: 60 });
    assert.deepEqual(creates[1]!.json(), { run: { code: "x", isolation: "gvisor" } });
    assert.deepEqual(srv.requests("POST", "/v1/sandboxes/templates")[0]!.json(), { name: "t", code: "x", isolation: "gvisor" });
    assert.ok(srv.requests("POST", "/v1/sandboxes/sbx_01src/pause")[0]!.headers["idempotency-key"]);
    const snaps = srv.requests("POST", "/v1/sandboxes/sbx_01src/snapshot");
    assert.deepEqual([snaps[0]!.json(), snaps[1]!.json()], [{}, { metadata: { step: "1" } }]);
    const forks = srv.requests("POST", "/v1/sandboxes/sbx_01src/fork");
    assert.deepEqual(forks[0]!.json(), {});
    assert.deepEqual(forks[1]!.json(), { snapshot: "snp_01a", metadata: { a: "b" }, expires_in_seconds: 600, env: { K: "v" } });
    assert.equal(forks[1]!.headers["idempotency-key"], "fork-1");
    assert.deepEqual(srv.requests("GET", "/v1/sandboxes/sbx_01src/snapshots")[0]!.query, { graph: "main", limit: "5" });
    assert.equal(srv.requests("DELETE", "/v1/snapshots/snp_01a").length, 1);
  });
});

test("the new codes are typed errors of their status's class", async () => {
  await withServer(handler, async (srv) => {
    const lbb = new LbbClient({ baseUrl: srv.url, apiKey: "k" });
    const ns = await lbb.sandboxes.get("sbx_01ns");
    await assert.rejects(ns.snapshot(), (e: unknown) => {
      assert.ok(e instanceof NotSupportedError && e instanceof ConflictError);
      assert.deepEqual([e.status, e.code], [409, "not_supported"]);
      assert.match(e.message, /memory snapshots need isolation "gvisor"/);
      return true;
    });
    await assert.rejects(ns.pause(), (e: unknown) => e instanceof CommandsRunningError && e instanceof ConflictError && e.code === "commands_running");
    assert.equal(ns.status, "running");
  });
});
