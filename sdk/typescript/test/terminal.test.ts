/**
 * Terminals from the SDK against a real server: a login shell on a real pty over the
 * WebSocket — resize and `stty size`, `cd` kept across lines, re-attach after a detach sees the
 * recent output, Ctrl-C, the exit code — the iterator and onData, and `ports.url`.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import { ConflictError, LbbClient, type Terminal } from "@littlebigbrain/client";

import { testServer } from "./server-env.js";

function client(t: import("node:test").TestContext): LbbClient | undefined {
  const s = testServer(t);
  return s && new LbbClient({ baseUrl: s.url, apiKey: s.key, graph: "main" });
}

/** Reads the terminal's output until `want` is in it; answers what came. */
async function expect(term: Terminal, want: string, timeoutMs = 30_000): Promise<string> {
  let out = "";
  const dec = new TextDecoder();
  const deadline = Date.now() + timeoutMs;
  while (!out.includes(want)) {
    const left = deadline - Date.now();
    if (left <= 0) throw new Error(`no ${JSON.stringify(want)} in the terminal's output: ${JSON.stringify(out.slice(-2000))}`);
    let chunk: Uint8Array | null;
    try {
      chunk = await term.read(left);
    } catch (e) {
      if ((e as Error).name === "TimeoutError") continue;
      throw e;
    }
    if (chunk === null) throw new Error(`the terminal ended before ${JSON.stringify(want)}: ${JSON.stringify(out.slice(-2000))}`);
    out += dec.decode(chunk, { stream: true });
  }
  return out;
}

test("sandbox.pty: a shell with resize, cd, re-attach, Ctrl-C and its exit code", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  await lbb.sandboxes.scoped({ expiresInSeconds: 600 }, async (sb) => {
    const term = await sb.pty.create({ cols: 80, rows: 24, env: { GREETING: "hello" } });
    assert.match(term.id, /^cmd_/);
    assert.equal(term.exitCode, undefined);
    term.resize(100, 30);
    // $((…)) keeps the marker out of the typed line the terminal echoes.
    term.send("stty size; echo size$((1+1))\n");
    assert.ok((await expect(term, "size2")).includes("30 100"));
    term.send("cd /tmp\n");
    // The server masks env values in output; their length shows they arrived.
    term.send("pwd; echo len${#GREETING}-$((2+2))\n");
    assert.ok((await expect(term, "len5-4")).includes("/tmp"));

    await term.close();
    const again = await sb.pty.attach(term.id, { cols: 90, rows: 20 });
    assert.equal(again.id, term.id);
    await expect(again, "len5-4"); // the recent output, first
    again.send("stty size; pwd; echo re$((3+3))\n");
    const out = await expect(again, "re6");
    assert.ok(out.includes("20 90") && out.includes("/tmp"), out);

    again.send("sleep 60\n");
    await new Promise((r) => setTimeout(r, 500));
    again.send("\x03");
    again.send("echo int$((4+4))\n");
    await expect(again, "int8", 15_000);
    again.send("exit 7\n");
    assert.equal(await again.wait(), 7);
    assert.ok(again.exit && ["exited", "failed"].includes(again.exit.status ?? ""), JSON.stringify(again.exit));
    assert.equal(await again.read(), null);
    await again.close();
    await assert.rejects(sb.pty.attach(term.id), ConflictError);
    const rec = await sb.commands.get(term.id);
    assert.equal(rec.exitCode, 7);

    const p = await sb.ports.url(8000, { expiresInSeconds: 60 });
    assert.equal(p.port, 8000);
    assert.match(p.url, /^http/);
  });
});

test("sandbox.pty: argv, the async iterator and onData", async (t) => {
  const lbb = client(t);
  if (!lbb) return;
  await lbb.sandboxes.scoped({ expiresInSeconds: 600 }, async (sb) => {
    const term = await sb.pty.create({ argv: ["sh", "-c", "cd /etc && pwd && stty size && exit 3"], cols: 50, rows: 10 });
    let out = "";
    for await (const chunk of term) out += new TextDecoder().decode(chunk);
    assert.ok(out.includes("/etc") && out.includes("10 50"), out);
    assert.equal(term.exitCode, 3);
    await term.close();

    const seen: string[] = [];
    const cb = await sb.pty.create({ argv: ["sh", "-c", "echo from-$((5*5))"], onData: (b) => void seen.push(Buffer.from(b).toString()) });
    assert.equal(await cb.wait(), 0);
    assert.ok(seen.join("").includes("from-25"), seen.join(""));
    await cb.close();

    // A burst of output arrives whole and in order: 23 KB, within the 32 KB (head and tail)
    // the server keeps of a terminal for a reader that lags; past that it skips ahead.
    const parts: Buffer[] = [];
    const flood = await sb.pty.create({ argv: ["sh", "-c", "seq 1 4000"] });
    assert.equal(await flood.wait({ onData: (b) => void parts.push(Buffer.from(b)) }), 0);
    const lines = Buffer.concat(parts).toString().split("\r\n");
    assert.deepEqual(lines, [...Array.from({ length: 4000 }, (_, i) => String(i + 1)), ""]);
    await flood.close();
  });
});
