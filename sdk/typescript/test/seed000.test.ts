/**
 * Seed 000's TypeScript samples, run as written against a real server.
 *
 * Each seed/*.snippet.ts holds samples of the product page unchanged between its markers
 * ("verbatim" checks that against the seed when it is at hand). Around them the tests add only
 * a preamble that makes `lbb` from ENDPOINT_URL and API_KEY (or gives "Four ways in" the `code`
 * the page defines above it) and an export of what they check. Samples of one section run in
 * page order in one module, as a reader would run them.
 */

import assert from "node:assert/strict";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { test, type TestContext } from "node:test";
import { fileURLToPath } from "node:url";

import { seedEnv, testServer } from "./server-env.js";

const here = dirname(fileURLToPath(import.meta.url)); // dist/test
const sources = resolve(here, "..", "..", "test", "seed");
const repo = resolve(here, "..", "..", "..", "..");

function seedText(): string | undefined {
  let path = process.env.LBB_SEED_FILE;
  if (!path) {
    const dir = join(repo, "..", "shared", "seeds");
    const f = existsSync(dir) ? readdirSync(dir).find((n) => n.startsWith("000_") && n.endsWith(".txt")) : undefined;
    if (!f) return undefined;
    path = join(dir, f);
  }
  return readFileSync(path, "utf8");
}

/** Runs a sample module against the test server; undefined (the test skipped) without one. */
async function sample<M>(t: TestContext, load: () => Promise<M>): Promise<M | undefined> {
  const s = testServer(t);
  if (!s) return undefined;
  seedEnv(s);
  return load();
}

const BEGIN = "// ---- seed 000, as written: ----\n";
const END = "// ---- end of the seed's text ----\n";

test("the samples are the seed's, as written", (t) => {
  const seed = seedText();
  if (!seed) return t.skip("seed 000 is not beside this checkout (../shared/seeds); set LBB_SEED_FILE to check the samples against it");
  const files = readdirSync(sources).filter((f) => f.endsWith(".snippet.ts"));
  assert.equal(files.length, 4);
  let samples = 0;
  for (const f of files) {
    const src = readFileSync(join(sources, f), "utf8");
    for (const part of src.split(BEGIN).slice(1)) {
      const end = part.indexOf(END);
      assert.ok(end > 0, `${f}: a sample without its end marker`);
      const sample = part.slice(0, end - 1); // the newline before the marker is the file's
      assert.ok(seed.includes(sample), `${f}: this is not the seed's sample as written:\n${sample}`);
      samples++;
    }
  }
  assert.equal(samples, 6);
});

test("one call: result is 6", async (t) => {
  const m = await sample(t, () => import("./seed/one_call.snippet.js"));
  if (!m) return;
  assert.equal(m.result, 6);
});

test("Level 1 and Level 2: ok, result 6, a command record; the template runs", async (t) => {
  const m = await sample(t, () => import("./seed/level1_level2.snippet.js"));
  if (!m) return;
  assert.equal(m.run.ok, true);
  assert.equal(m.run.result, 6);
  assert.match(m.run.command, /^cmd_/);
  const tpl = await m.lbb.sandboxes.templates.get("normalize");
  assert.equal(tpl.base, "lbb/python");
  assert.deepEqual([tpl.limits?.memoryMib, tpl.timeoutMs, tpl.config], [2048, 60_000, { unit: "cm" }]);
  // The sample drops the template run's answer; its record says what happened.
  const { data } = await m.lbb.commands.list({ limit: 1 });
  assert.equal(data[0]?.template?.name, "normalize");
  assert.equal(data[0]?.template?.version, tpl.version);
  assert.equal(data[0]?.status, "succeeded");
  assert.equal(data[0]?.result, 6);
});

test("Level 3: scoped counts 2 lines and reads the upper-cased tail; create, stop, resume, delete", async (t) => {
  const m = await sample(t, () => import("./seed/level3.snippet.js"));
  if (!m) return;
  assert.equal(m.out.lines, 2);
  assert.ok(m.out.upper.includes("1,2\n3,4".toUpperCase()), `upper.stdout.tail: ${JSON.stringify(m.out.upper)}`);
  const info = (await m.lbb.sandboxes.get(m.sb.id)).info;
  assert.equal(info.status, "destroyed");
  assert.equal(info.endReason, "deleted");
  // The scoped sandbox was deleted too: no sandbox of the graph is left running.
  const running = await m.lbb.sandboxes.list({ status: "running" });
  assert.equal(running.data.length, 0, `left running: ${running.data.map((x) => x.id).join(", ")}`);
});

test("Four ways in: result is 6", async (t) => {
  const m = await sample(t, () => import("./seed/four_ways_in.snippet.js"));
  if (!m) return;
  assert.equal(m.result, 6);
});
