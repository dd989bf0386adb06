/**
 * The client against a scripted local server: typed errors, idempotency keys, retries, 202
 * waits, camelCase mapping, scoped cleanup and event streams. No lbb server needed.
 */

import assert from "node:assert/strict";
import { createServer } from "node:net";
import { describe, test } from "node:test";

import {
  APIConnectionError,
  APIStatusError,
  AuthenticationError,
  CommandsRunningError,
  ConflictError,
  FileInUseError,
  IdempotencyConflictError,
  IdempotencyKeyRequiredError,
  InternalServerError,
  InvalidRequestError,
  IsolationUnavailableError,
  LbbClient,
  LbbError,
  NotFoundError,
  NotSupportedError,
  OutputLostError,
  PathOutsideWorkspaceError,
  PayloadTooLargeError,
  PermissionDeniedError,
  QuotaBytesExceededError,
  QuotaExceededError,
  RateLimitError,
  SSEDecoder,
  Sandbox,
  TooManySandboxesError,
  Transport,
  UnavailableError,
  UnprocessableError,
  errorFromBody,
  outputText,
  type WireSandbox,
} from "@littlebigbrain/client";

import { RUN_OK, error, withServer, type Reply, type Seen } from "./fake-server.js";

const CODE = "def run(input, config):\n    return sum(input)";

describe("errors", () => {
  const cases: [number, string, Function][] = [
    [400, "invalid_request", InvalidRequestError],
    [400, "limit_exceeded", InvalidRequestError],
    [400, "idempotency_key_required", IdempotencyKeyRequiredError],
    [400, "path_outside_workspace", PathOutsideWorkspaceError],
    [400, "isolation_unavailable", IsolationUnavailableError],
    [401, "unauthorized", AuthenticationError],
    [403, "forbidden", PermissionDeniedError],
    [404, "not_found", NotFoundError],
    [409, "conflict", ConflictError],
    [409, "not_supported", NotSupportedError],
    [409, "commands_running", CommandsRunningError],
    [409, "file_in_use", FileInUseError],
    [413, "payload_too_large", PayloadTooLargeError],
    [413, "quota_bytes_exceeded", QuotaBytesExceededError],
    [422, "unprocessable", UnprocessableError],
    [422, "idempotency_key_reused", IdempotencyConflictError],
    [429, "limit_exceeded", RateLimitError],
    [429, "too_many_sandboxes", TooManySandboxesError],
    [429, "quota_exceeded", QuotaExceededError],
    [500, "internal", InternalServerError],
    [503, "unavailable", UnavailableError],
    [404, "too_many_sandboxes", NotFoundError],
    [400, "not_supported", InvalidRequestError],
    [418, "teapot", APIStatusError],
  ];
  for (const [status, code, cls] of cases) {
    test(`${status} ${code} → ${cls.name}`, () => {
      const e = errorFromBody(status, JSON.stringify({ error: { code, message: "what failed", request_id: "req_1" } }));
      assert.equal(e.constructor, cls);
      assert.ok(e instanceof LbbError && e instanceof Error);
      assert.deepEqual([e.status, e.code, e.message, e.requestId], [status, code, "what failed", "req_1"]);
      assert.equal(e.name, cls.name);
      assert.match(String(e), new RegExp(`what failed.*${code}.*req_1`));
    });
  }

  test("an answer that is not JSON", () => {
    const e = errorFromBody(502, "<html>bad gateway</html>", "req_h");
    assert.ok(e instanceof InternalServerError);
    assert.equal(e.code, "internal");
    assert.match(e.message, /bad gateway/);
    assert.equal(e.requestId, "req_h");
  });

  test("the client throws them", async () => {
    await withServer(
      (seen) => (seen.path === "/v1/commands/cmd_missing" ? error(404, "not_found", "no such command", "req_404") : error(401, "unauthorized")),
      async (srv) => {
        const lbb = new LbbClient({ baseUrl: srv.url, apiKey: "k", maxRetries: 0 });
        await assert.rejects(lbb.commands.get("cmd_missing"), (e: unknown) => e instanceof NotFoundError && e.requestId === "req_404");
        await assert.rejects(lbb.sandboxes.run({ code: CODE }), AuthenticationError);
      },
    );
  });

  test("nothing listening: a connection error after the retries", async () => {
    const port = await new Promise<number>((resolve) => {
      const s = createServer();
      s.listen(0, "127.0.0.1", () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => resolve(p));
      });
    });
    const lbb = new LbbClient({ baseUrl: `http://127.0.0.1:${port}`, apiKey: "k", maxRetries: 1 });
    await assert.rejects(lbb.sandboxes.run({ code: CODE }), (e: unknown) => e instanceof APIConnectionError && e.status === undefined && e.code === "connection_error");
  });
});

function failFirst(how: "503" | "drop") {
  return (seen: Seen, nth: number): Reply => {
    if (nth === 1) return how === "503" ? error(503, "unavailable", "draining") : { drop: true };
    return { body: RUN_OK };
  };
}

describe("idempotency and retries", () => {
  for (const how of ["503", "drop"] as const) {
    test(`a retry after ${how} sends the same Idempotency-Key`, async () => {
      await withServer(failFirst(how), async (srv) => {
        const lbb = new LbbClient({ baseUrl: srv.url, apiKey: "secret", graph: "g1" });
        const run = await lbb.sandboxes.run({ code: CODE, input: [1, 2, 3] });
        assert.equal(run.result, 6);
        const posts = srv.requests("POST", "/v1/sandboxes");
        assert.equal(posts.length, 2);
        const k0 = posts[0]!.headers["idempotency-key"];
        assert.ok(k0 && /^[0-9a-f-]{36}$/.test(k0));
        assert.equal(posts[1]!.headers["idempotency-key"], k0);
        assert.deepEqual(posts[0]!.body, posts[1]!.body);
        for (const p of posts) {
          assert.equal(p.query.graph, "g1");
          assert.equal(p.headers.authorization, "Bearer secret");
        }
        assert.deepEqual(posts[0]!.json(), { run: { code: CODE, input: [1, 2, 3] } });
      });
    });
  }

  test("a fresh key per call, or the caller's", async () => {
    await withServer(
      () => ({ body: RUN_OK }),
      async (srv) => {
        const lbb = new LbbClient({ baseUrl: srv.url, apiKey: "k" });
        await lbb.sandboxes.run({ code: CODE });
        await lbb.sandboxes.run({ code: CODE });
        await lbb.sandboxes.run({ code: CODE, idempotencyKey: "sum-a" });
        const keys = srv.requests("POST", "/v1/sandboxes").map((s) => s.headers["idempotency-key"]);
        assert.notEqual(keys[0], keys[1]);
        assert.equal(keys[2], "sum-a");
      },
    );
  });

  test("Retry-After, then give up with the last error", async () => {
    await withServer(
      (_s, nth) => ({ ...error(503, "unavailable", "down", `req_${nth}`), headers: { "Retry-After": "0" } }),
      async (srv) => {
        const lbb = new LbbClient({ baseUrl: srv.url, apiKey: "k", maxRetries: 2 });
        await assert.rejects(lbb.sandboxes.run({ code: CODE }), (e: unknown) => e instanceof UnavailableError && e.requestId === "req_3");
        assert.equal(srv.requests("POST", "/v1/sandboxes").length, 3);
      },
    );
  });

  test("no retry of a 429 quota_exceeded; a 429 too_many_sandboxes is retried", async () => {
    await withServer(
      (seen) =>
        seen.path === "/v1/files"
          ? error(429, "quota_exceeded", "graph main: quota files (Files of the graph) exceeded: usage 2, limit 2")
          : { ...error(429, "too_many_sandboxes", "graph main has 10 running sandboxes"), headers: { "Retry-After": "0" } },
      async (srv) => {
        const lbb = new LbbClient({ baseUrl: srv.url, apiKey: "k", maxRetries: 2 });
        await assert.rejects(lbb.files.upload("x", { name: "x" }), (e: unknown) => e instanceof QuotaExceededError && /usage 2, limit 2/.test(e.message));
        assert.equal(srv.requests("POST", "/v1/files").length, 1);
        await assert.rejects(lbb.sandboxes.run({ code: CODE }), TooManySandboxesError);
        assert.equal(srv.requests("POST", "/v1/sandboxes").length, 3);
      },
    );
  });

  test("no retry of a 422", async () => {
    await withServer(
      () => error(422, "idempotency_key_reused"),
      async (srv) => {
        const lbb = new LbbClient({ baseUrl: srv.url, apiKey: "k" });
        await assert.rejects(lbb.sandboxes.run({ code: CODE, idempotencyKey: "k1" }), IdempotencyConflictError);
        assert.equal(srv.seen.length, 1);
      },
    );
  });
});

test("an answer broken off in its body is retried, then a connection error", async () => {
  const rec = { id: "cmd_01b", sandbox: "sbx_1", kind: "process", status: "succeeded", exit_code: 0 };
  await withServer((_seen, nth) => (nth === 1 ? { body: rec, truncate: true } : { body: rec }), async (srv) => {
    const lbb = new LbbClient({ baseUrl: srv.url, apiKey: "k" });
    assert.equal((await lbb.commands.get("cmd_01b")).id, "cmd_01b");
    assert.equal(srv.requests("GET", "/v1/commands/cmd_01b").length, 2);
  });
  await withServer(() => ({ body: "abc", truncate: true }), async (srv) => {
    const lbb = new LbbClient({ baseUrl: srv.url, apiKey: "k", maxRetries: 1 });
    await assert.rejects(lbb.sandboxes.get("sbx_1"), (e: unknown) => e instanceof APIConnectionError && e.code === "connection_error");
  });
});

test("past wait_ms (202) the client waits on the command", async () => {
  const running = { ...RUN_OK, ok: false, result: null, status: "running", exit_code: null };
  await withServer(
    (seen, nth) => {
      if (seen.method === "POST") return { status: 202, body: running };
      assert.equal(seen.path, "/v1/commands/cmd_01test");
      assert.ok(Number(seen.query.wait_ms) > 0);
      if (nth === 1) return { body: { id: "cmd_01test", sandbox: "sbx_01test", kind: "run", status: "running", ok: false } };
      return {
        body: {
          id: "cmd_01test", sandbox: "sbx_01test", kind: "run", status: "succeeded", ok: true, result: 6, exit_code: 0,
          stdout: { head: "x", tail: "", bytes: 1 }, stderr: { head: "", tail: "", bytes: 0 }, duration_ms: 1200,
        },
      };
    },
    async (srv) => {
      const lbb = new LbbClient({ baseUrl: srv.url, apiKey: "k" });
      const run = await lbb.sandboxes.run<number>({ code: CODE, input: [1, 2, 3], waitMs: 0 });
      assert.equal(srv.requests("POST", "/v1/sandboxes")[0]!.json().wait_ms, 0);
      assert.deepEqual([run.ok, run.result, run.command, run.status, run.exitCode, run.durationMs], [true, 6, "cmd_01test", "succeeded", 0, 1200]);
      assert.deepEqual(run.stdout, { head: "x", tail: "", bytes: 1 });
      assert.equal(srv.requests("GET", "/v1/commands/cmd_01test").length, 2);
      const early = await lbb.sandboxes.run({ code: CODE, waitMs: 0, wait: false });
      assert.equal(early.status, "running");
    },
  );
});

test("camelCase in, snake_case on the wire; user data untouched", async () => {
  await withServer(
    (seen) => {
      if (seen.path === "/v1/sandboxes/templates") {
        return { status: 201, body: { id: "sbt_1", name: "normalize", version: 1, base: "lbb/python", limits: { memory_mib: 2048 }, timeout_ms: 60000, config: { unit_name: "cm" }, created_at: "2030-01-01T00:00:00Z" } };
      }
      return { body: { ...RUN_OK, result: { snake_key: 1 } } };
    },
    async (srv) => {
      const lbb = new LbbClient({ baseUrl: srv.url, apiKey: "k" });
      const t = await lbb.sandboxes.templates.create({ name: "normalize", base: "lbb/python", code: CODE, limits: { memoryMib: 2048 }, commandTimeoutMs: 60_000, config: { unit_name: "cm" } });
      assert.deepEqual(srv.requests("POST", "/v1/sandboxes/templates")[0]!.json(), {
        name: "normalize", base: "lbb/python", code: CODE, limits: { memory_mib: 2048 }, timeout_ms: 60000, config: { unit_name: "cm" },
      });
      assert.deepEqual([t.limits, t.timeoutMs, t.config], [{ memoryMib: 2048 }, 60000, { unit_name: "cm" }]);
      const run = await lbb.sandboxes.run({ template: "normalize", input: { some_key: [1] }, limits: { diskMib: 10 }, timeoutMs: 5000 });
      assert.deepEqual(run.result, { snake_key: 1 });
      assert.deepEqual(srv.requests("POST", "/v1/sandboxes")[0]!.json(), {
        run: { template: "normalize", input: { some_key: [1] } }, limits: { disk_mib: 10 }, timeout_ms: 5000,
      });
    },
  );
});

test("egress, the API grant and git clone on the wire", async () => {
  await withServer(
    (seen) => (seen.path === "/v1/sandboxes" && !(seen.json() as { run?: unknown }).run
      ? { status: 201, body: { id: "sbx_e", status: "running", created_at: "2030-01-01T00:00:00Z", egress: { mode: "allowlist", allow: ["pkgs.example.org"], quota_bytes: 5 }, usage: { vcpu_ms: 1, gib_ms: 2, egress: { bytes_out: 3, bytes_in: 4, connections: 1, refused: 0 } } } }
      : { body: RUN_OK }),
    async (srv) => {
      const lbb = new LbbClient({ baseUrl: srv.url, apiKey: "k" });
      await lbb.sandboxes.run({ code: CODE, egress: { mode: "public", quotaBytes: 10 } });
      const sb = await lbb.sandboxes.create({ egress: { mode: "allowlist", allow: ["pkgs.example.org"] }, api: { scopes: ["sandboxes:read"], maxRuns: 2 }, git: { url: "https://example.org/r.git", depth: 1 } });
      const [runBody, createBody] = srv.requests("POST", "/v1/sandboxes").map((r) => r.json());
      assert.deepEqual((runBody as { run: unknown }).run, { code: CODE, egress: { mode: "public", quota_bytes: 10 } });
      assert.deepEqual(createBody, { egress: { mode: "allowlist", allow: ["pkgs.example.org"] }, api: { scopes: ["sandboxes:read"], max_runs: 2 }, git: { url: "https://example.org/r.git", depth: 1 } });
      assert.deepEqual([sb.info.egress, sb.info.usage?.egress], [{ mode: "allowlist", allow: ["pkgs.example.org"], quotaBytes: 5 }, { bytesOut: 3, bytesIn: 4, connections: 1, refused: 0 }]);
    },
  );
});

test("session and size on the wire: the session's sandbox answered (200), its archive read", async () => {
  const workspace = { sha256: "ab".repeat(32), bytes: 3006129, disk_bytes: 2147483648, archived_at: "2030-01-01T00:00:00Z" };
  await withServer(
    (seen) => (seen.method === "POST"
      ? { status: 200, body: { id: "sbx_s", status: "running", session: "review-42", size: "standard-2", created_at: "2030-01-01T00:00:00Z" } }
      : { body: { data: [{ id: "sbx_s", status: "stopped", session: "review-42", size: "standard-2", workspace, created_at: "2030-01-01T00:00:00Z" }] } }),
    async (srv) => {
      const lbb = new LbbClient({ baseUrl: srv.url, apiKey: "k" });
      const sb = await lbb.sandboxes.create({ session: "review-42", size: "small" });
      assert.deepEqual(srv.requests("POST", "/v1/sandboxes").at(-1)!.json(), { session: "review-42", size: "small" });
      assert.deepEqual([sb.info.id, sb.info.session, sb.info.size], ["sbx_s", "review-42", "standard-2"]);
      const page = await lbb.sandboxes.list({ session: "review-42" });
      assert.equal(srv.requests("GET", "/v1/sandboxes").at(-1)!.query.session, "review-42");
      assert.deepEqual(page.data[0]!.workspace, { sha256: "ab".repeat(32), bytes: 3006129, diskBytes: 2147483648, archivedAt: "2030-01-01T00:00:00Z" });
    },
  );
});

function sandboxServer(log: string[]) {
  return (seen: Seen): Reply => {
    log.push(`${seen.method} ${seen.path}`);
    const p = seen.path;
    if (seen.method === "POST" && p === "/v1/sandboxes") return { status: 201, body: { id: "sbx_01l3", status: "running", created_at: "2030-01-01T00:00:00Z" } };
    if (seen.method === "DELETE" && p === "/v1/sandboxes/sbx_01l3") return { body: { id: "sbx_01l3", status: "destroyed" } };
    if (p === "/v1/sandboxes/sbx_01l3/files/content") {
      return seen.method === "PUT" ? { body: { path: `/workspace/${seen.query.path}`, size: seen.body.length } } : { body: Buffer.from("1,2\n3,4\n") };
    }
    if (p === "/v1/sandboxes/sbx_01l3/files") return { body: { data: [{ name: "data.csv", path: "/workspace/data.csv", type: "file", size: 8 }] } };
    if (p === "/v1/sandboxes/sbx_01l3/run") return { body: { ...RUN_OK, result: 2 } };
    if (p === "/v1/sandboxes/sbx_01l3/commands") {
      return {
        body: {
          id: "cmd_01c", sandbox: "sbx_01l3", kind: "process", status: "succeeded", ok: true, exit_code: 0, created_at: "2030-01-01T00:00:00Z", duration_ms: 5,
          stdout: { head: "1,2\n3,4\n\n", tail: "1,2\n3,4\n\n", bytes: 9 }, stderr: { head: "", tail: "", bytes: 0 },
        },
      };
    }
    if (p.endsWith("/stop") || p.endsWith("/resume")) return { body: { id: "sbx_01l3", status: p.endsWith("/stop") ? "stopped" : "running", created_at: "2030-01-01T00:00:00Z" } };
    return error(404, "not_found");
  };
}

describe("sandboxes", () => {
  test("scoped deletes after success and after an error", async () => {
    const log: string[] = [];
    await withServer(sandboxServer(log), async (srv) => {
      const lbb = new LbbClient({ baseUrl: srv.url, apiKey: "k" });
      const out = await lbb.sandboxes.scoped({}, async (sb) => {
        assert.equal(sb.id, "sbx_01l3");
        await sb.files.write("data.csv", "1,2\n3,4\n");
        assert.deepEqual(await sb.files.read("data.csv"), new TextEncoder().encode("1,2\n3,4\n"));
        assert.equal(await sb.files.readText("data.csv"), "1,2\n3,4\n");
        const { data } = await sb.files.list(".");
        assert.equal(data[0]!.path, "/workspace/data.csv");
        const rows = await sb.run({ code: "x", input: { file: "data.csv" } });
        const upper = await sb.commands.create({ argv: ["python", "upper.py"], waitMs: 30_000 });
        return { lines: rows.result, upper: upper.stdout.tail };
      });
      assert.deepEqual(out, { lines: 2, upper: "1,2\n3,4\n\n" });
      assert.equal(log.at(-1), "DELETE /v1/sandboxes/sbx_01l3");
      const put = srv.requests("PUT", "/v1/sandboxes/sbx_01l3/files/content")[0]!;
      assert.equal(put.body.toString(), "1,2\n3,4\n");
      assert.equal(put.query.path, "data.csv");
      assert.ok(put.headers["idempotency-key"]);
      const cmd = srv.requests("POST", "/v1/sandboxes/sbx_01l3/commands")[0]!;
      assert.deepEqual(cmd.json(), { argv: ["python", "upper.py"], wait_ms: 30000 });
      assert.ok(cmd.headers["idempotency-key"]);
      assert.deepEqual(srv.requests("POST", "/v1/sandboxes/sbx_01l3/run")[0]!.json(), { code: "x", input: { file: "data.csv" } });

      log.length = 0;
      await assert.rejects(
        lbb.sandboxes.scoped({ expiresInSeconds: 60 }, async () => {
          throw new RangeError("in the block");
        }),
        RangeError,
      );
      assert.deepEqual(log, ["POST /v1/sandboxes", "DELETE /v1/sandboxes/sbx_01l3"]);
      assert.deepEqual(srv.requests("POST", "/v1/sandboxes").at(-1)!.json(), { expires_in_seconds: 60 });
    });
  });

  test("create, stop, resume, delete", async () => {
    const log: string[] = [];
    await withServer(sandboxServer(log), async (srv) => {
      const lbb = new LbbClient({ baseUrl: srv.url, apiKey: "k" });
      const sb = await lbb.sandboxes.create({ expiresInSeconds: 600 });
      assert.equal((await sb.stop()).status, "stopped");
      assert.equal(sb.status, "stopped");
      assert.equal((await sb.resume()).status, "running");
      await sb.delete();
      assert.deepEqual(log, ["POST /v1/sandboxes", "POST /v1/sandboxes/sbx_01l3/stop", "POST /v1/sandboxes/sbx_01l3/resume", "DELETE /v1/sandboxes/sbx_01l3"]);
    });
  });
});

describe("streams", () => {
  test("the decoder", () => {
    const d = new SSEDecoder();
    const evs = [": hi", "id: 1", "event: stdout", "data: a", "data: b", "", 'data: {"data": "c"}', "", "retry: 10", "event: exit", 'data: {"exit_code": 0}', ""]
      .map((l) => d.feed(l))
      .filter((e) => e !== undefined);
    assert.deepEqual(evs.map((e) => [e.event, e.data, e.id]), [["stdout", "a\nb", "1"], ["message", '{"data": "c"}', "1"], ["exit", '{"exit_code": 0}', "1"]]);
    assert.equal(evs[1]!.text, "c");
    assert.deepEqual(evs[2]!.json(), { exit_code: 0 });
    assert.equal(evs[2]!.retry, 10);
  });

  test("reconnects with Last-Event-ID after a broken connection", async () => {
    await withServer(
      (seen, nth) => {
        assert.equal(seen.query.stream, "stdout");
        assert.equal(seen.query.follow, "true");
        if (nth === 1) return { stream: ["id: 1\nevent: stdout\ndata: one\n\n", null] };
        assert.equal(seen.headers["last-event-id"], "1");
        return { stream: ["id: 2\nevent: stdout\r\ndata: tw", "o\n\n", 'id: 3\nevent: exit\ndata: {"exit_code": 0}\n\n'] };
      },
      async (srv) => {
        const lbb = new LbbClient({ baseUrl: srv.url, apiKey: "k" });
        const got: [string, string][] = [];
        for await (const ev of lbb.commands.stream("cmd_01s")) got.push([ev.event, ev.data]);
        assert.deepEqual(got, [["stdout", "one"], ["stdout", "two"], ["exit", '{"exit_code": 0}']]);
      },
    );
  });
});

describe("commands.run", () => {
  const ev = (name: string, data: unknown, id?: string) => `${id ? `id: ${id}\n` : ""}event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
  const RECORD = { id: "cmd_1", sandbox: "sbx_1", status: "running", stdout: { head: "", tail: "", bytes: 0 }, stderr: { head: "", tail: "", bytes: 0 } };
  const exit = (out: number, err: number, tail = "3\n") => ({
    ...RECORD,
    status: "succeeded",
    exit_code: 0,
    stdout: { head: "", tail, bytes: out },
    stderr: { head: "", tail: "e\n", bytes: err },
  });
  const sandbox = (url: string) => new Sandbox(new Transport({ baseUrl: url, apiKey: "k" }), { id: "sbx_1" } as WireSandbox);

  test("a shell line, every chunk to the callbacks, the output up to the limit", async () => {
    await withServer(
      (seen) => {
        assert.equal(seen.json().stream, true);
        assert.equal(seen.headers.accept, "text/event-stream");
        assert.ok(seen.headers["idempotency-key"]);
        return {
          stream: [
            ev("command", RECORD),
            ev("stdout", { stream: "stdout", offset: 0, data: "1\n2\n" }, "4.0"),
            ev("stderr", { stream: "stderr", offset: 0, data: "e\n" }, "4.2"),
            ev("stdout", { stream: "stdout", offset: 4, data: "\ufffd", base64: "/w==" }, "5.2"),
            ev("stdout", { stream: "stdout", offset: 5, data: "3\n" }, "7.2"),
            ev("exit", exit(7, 2)),
          ],
        };
      },
      async (srv) => {
        const sb = sandbox(srv.url);
        const got: string[] = [];
        const cmd = await sb.commands.run("seq 1 3", {
          onStdout: (t) => void got.push(`out ${t}`),
          onStderr: async (t) => void got.push(`err ${t}`),
          outputLimit: 6,
        });
        assert.deepEqual(got, ["out 1\n2\n", "err e\n", "out \ufffd", "out 3\n"]);
        assert.equal(cmd.exitCode, 0);
        assert.deepEqual(cmd.output, { stdout: "1\n2\n\ufffd3", stderr: "e\n", truncated: true });
        assert.deepEqual(srv.requests("POST", "/v1/sandboxes/sbx_1/commands")[0]!.json().argv, ["bash", "-lc", "seq 1 3"]);
        const plain = await sb.commands.run({ argv: ["seq", "1", "3"] });
        assert.equal(plain.output, undefined);
        assert.equal(plain.stdout.tail, "3\n");
        assert.deepEqual(srv.requests("POST", "/v1/sandboxes/sbx_1/commands")[1]!.json().argv, ["seq", "1", "3"]);
      },
    );
  });

  test("says when output was lost", async () => {
    await withServer(
      () => ({
        stream: [
          ev("command", RECORD),
          ev("stdout", { stream: "stdout", offset: 0, data: "1\n" }, "2.0"),
          ev("stdout", { stream: "stdout", offset: 10, data: "3\n" }, "12.0"),
          ev("exit", exit(14, 0)),
        ],
      }),
      async (srv) => {
        await assert.rejects(sandbox(srv.url).commands.run("seq 1 3"), (e: unknown) => e instanceof OutputLostError && e.lostBytes === 10);
      },
    );
  });

  test("resumes a broken stream with the same key", async () => {
    await withServer(
      (seen, nth) => {
        if (nth === 1) return { stream: [ev("command", RECORD), ev("stdout", { stream: "stdout", offset: 0, data: "1\n" }, "2.0"), null] };
        assert.equal(seen.headers["last-event-id"], "2.0");
        return { stream: [ev("command", RECORD), ev("stdout", { stream: "stdout", offset: 2, data: "2\n" }, "4.0"), ev("exit", exit(4, 0, "2\n"))] };
      },
      async (srv) => {
        const cmd = await sandbox(srv.url).commands.run(["seq", "1", "2"], { outputLimit: 100 });
        const posts = srv.requests("POST", "/v1/sandboxes/sbx_1/commands");
        assert.equal(cmd.output?.stdout, "1\n2\n");
        assert.equal(posts.length, 2);
        assert.equal(posts[0]!.headers["idempotency-key"], posts[1]!.headers["idempotency-key"]);
      },
    );
  });
});

test("outputText", () => {
  assert.equal(outputText({ head: "hi\n", tail: "", bytes: 3 }), "hi\n");
  assert.equal(outputText({ head: "hi\n", tail: "hi\n", bytes: 3 }), "hi\n");
  assert.equal(outputText({ head: "ab", tail: "cd", bytes: 4 }), "abcd");
  assert.equal(outputText({ head: "ab", tail: "yz", bytes: 10 }), "ab\n…\nyz");
});

test("defaults from the environment", () => {
  const saved = { ...process.env };
  try {
    process.env.LBB_URL = "http://example.invalid:1/";
    delete process.env.LBB_GRAPH;
    const lbb = new LbbClient({ apiKey: "x" });
    assert.equal(lbb.baseUrl, "http://example.invalid:1");
    assert.equal(lbb.graph, "main");
    delete process.env.LBB_URL;
    assert.equal(new LbbClient({ apiKey: "x" }).baseUrl, "http://127.0.0.1:7700");
  } finally {
    process.env = saved;
  }
});
