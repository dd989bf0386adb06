/**
 * commands.run against a real `lbb serve`, on both drivers: a shell line or argv, every chunk
 * to onStdout/onStderr as it comes, none lost however slow the callback (the process waits
 * for it), the output in the answer up to outputLimit. The gvisor cases skip, saying why, when
 * runsc is missing.
 */

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { test, type TestContext } from "node:test";

import { LbbClient, type Sandbox } from "@littlebigbrain/client";

import { testServer } from "./server-env.js";

const RUNSC = "/usr/local/lib/lbb/runsc";
const SEQ = 3_000_000;
const want = execFileSync("seq", ["1", String(SEQ)], { maxBuffer: 64 << 20 }).toString();

async function sandbox(t: TestContext, isolation: string): Promise<Sandbox | undefined> {
  const s = testServer(t);
  if (!s) return undefined;
  if (isolation === "gvisor" && !existsSync(RUNSC)) {
    t.skip(`RequiresGvisor: ${RUNSC} is missing`);
    return undefined;
  }
  const lbb = new LbbClient({ baseUrl: s.url, apiKey: s.key, graph: "main" });
  const sb = await lbb.sandboxes.create({ isolation, expiresInSeconds: 600 });
  t.after(() => sb.delete());
  return sb;
}

for (const isolation of ["ns", "gvisor"]) {
  test(`${isolation}: a shell line and argv`, async (t) => {
    const sb = await sandbox(t, isolation);
    if (!sb) return;
    await sb.files.write("a.txt", "1\n2\n");
    const ls = await sb.commands.run("ls -l | wc -l");
    assert.equal(ls.status, "succeeded");
    assert.equal(ls.stdout.tail, "2\n");
    assert.deepEqual(ls.argv, ["bash", "-lc", "ls -l | wc -l"]);
    const cat = await sb.commands.run(["cat", "a.txt"], { outputLimit: 1 << 20 });
    assert.deepEqual(cat.output, { stdout: "1\n2\n", stderr: "", truncated: false });
    const failed = await sb.commands.run("echo oops >&2; exit 3");
    assert.deepEqual([failed.status, failed.exitCode, failed.stderr.tail], ["failed", 3, "oops\n"]);
  });

  test(`${isolation}: seq 1 ${SEQ} whole through the callbacks`, async (t) => {
    const sb = await sandbox(t, isolation);
    if (!sb) return;
    const out: string[] = [];
    const err: string[] = [];
    const cmd = await sb.commands.run(`seq 1 ${SEQ}; echo done >&2`, {
      onStdout: (s) => void out.push(s),
      onStderr: (s) => void err.push(s),
      outputLimit: 1 << 20,
      timeoutMs: 300_000,
    });
    assert.equal(cmd.status, "succeeded");
    const got = out.join("");
    assert.equal(got.length, want.length);
    assert.ok(got === want, "stdout is not seq's");
    assert.equal(err.join(""), "done\n");
    assert.equal(cmd.output?.stdout, want.slice(0, 1 << 20));
    assert.equal(cmd.output?.truncated, true);
    assert.equal(cmd.stdout.bytes, want.length);
    assert.equal(cmd.stdout.truncated, true);
  });

  test(`${isolation}: seq 1 ${SEQ} whole to a slow callback`, async (t) => {
    const sb = await sandbox(t, isolation);
    if (!sb) return;
    const out: string[] = [];
    const cmd = await sb.commands.run(["seq", "1", String(SEQ)], {
      onStdout: async (s) => {
        out.push(s);
        await sleep(2);
      },
      timeoutMs: 300_000,
    });
    assert.equal(cmd.status, "succeeded");
    assert.ok(out.join("") === want, "stdout is not seq's");
    // The process waited for the reader: it ran about as long as the reading took.
    assert.ok(cmd.durationMs >= 0.5 * out.length * 2, `the command took ${cmd.durationMs} ms for ${out.length} chunks`);
  });
}
