/** The step helper's key is the Go SDK's (sdk/go/step): one step, one key, in any language. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { stepKey } from "../src/step.js";

test("stepKey is stable and the same as sdk/go/step's Key", async () => {
  const k = await stepKey({ workflow: "wf-1", step: "append", attempt: 3 });
  assert.equal(k, "step-78ccbc250ccb4472b263d51336c07f99");
  assert.equal(await stepKey({ workflow: "wf-1", run: "wf-1", step: "append", attempt: 4 }), k);
  assert.notEqual(await stepKey({ workflow: "wf-1", step: "other" }), k);
});
