/**
 * The code interpreter from the SDK against a real server: seed 003's recipe (a plain
 * snippet in one call) and a context's cells, streamed.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { LbbClient, outputText, type CodeOutput } from "@littlebigbrain/client";

import { testServer } from "./server-env.js";

function client(t: import("node:test").TestContext): LbbClient | undefined {
  const s = testServer(t);
  return s && new LbbClient({ baseUrl: s.url, apiKey: s.key, graph: "main" });
}

test("seed 003: runCode of a plain snippet, a non-zero exit, an idempotent retry", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  const code = "import math\nprint(math.factorial(20))";
  const r = await lbb.sandboxes.runCode({ language: "python", code, timeoutMs: 30000, idempotencyKey: "ts-seed003" });
  assert.deepEqual([r.exitCode, outputText(r.stdout), outputText(r.stderr)], [0, "2432902008176640000\n", ""]);
  assert.equal(typeof r.durationMs, "number");
  const again = await lbb.sandboxes.runCode({ language: "python", code, timeoutMs: 30000, idempotencyKey: "ts-seed003" });
  assert.equal(again.command, r.command);
  const bad = await lbb.sandboxes.runCode({ language: "node", code: "console.error('no'); process.exit(4)" });
  assert.deepEqual([bad.ok, bad.exitCode, outputText(bad.stderr)], [false, 4, "no\n"]);
});

test("sandbox.code.run: state across cells, streamed output and results, an error", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  await lbb.sandboxes.scoped({}, async (sb) => {
    await sb.code.run("x = 20");
    const out: string[] = [];
    const results: CodeOutput[] = [];
    const r = await sb.code.run("print('hi')\nx * 2 + 2", { onStdout: (s) => out.push(s), onResult: (o) => results.push(o) });
    assert.equal(r.text, "42");
    assert.deepEqual(out, ["hi\n"]);
    assert.equal(results[0]?.data["text/plain"], "42");
    const e = await sb.code.run("raise ValueError('bad')");
    assert.equal(e.error?.name, "ValueError");
    const ctx = (await sb.code.contexts())[0]!;
    await sb.code.restartContext(ctx.id);
    const gone = await sb.code.run("x", { context: ctx.id });
    assert.equal(gone.error?.name, "NameError");
  });
});
