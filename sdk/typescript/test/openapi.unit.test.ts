/** src/openapi.ts is what openapi-typescript makes of internal/api/openapi.json today. */

import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const script = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "scripts", "openapi-types.mjs"); // from dist/test

test("src/openapi.ts is generated from the OpenAPI document", () => {
  const done = spawnSync(process.execPath, [script, "--check"], { encoding: "utf8" });
  assert.equal(done.status, 0, done.stderr);
});
