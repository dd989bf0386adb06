/**
 * The SDK's records (src/types.ts) are the wire types (src/wire.ts, generated from the OpenAPI
 * document) in camelCase: every field of a record is a field of its schema, or `raw`. The
 * compiler checks it; the test only makes the check part of the suite.
 */

import assert from "node:assert/strict";
import { test } from "node:test";

import type * as T from "../src/types.js";
import type * as W from "../src/wire.js";

type Camel<S extends string> = S extends `${infer H}_${infer R}` ? `${H}${Capitalize<Camel<R>>}` : S;
/** The fields of P that are not a camelCase field of the wire type. */
type Invented<P, Wire> = Exclude<keyof P, Camel<keyof Wire & string> | "raw">;
/** true when there are none; else the invented fields, which `true` does not satisfy. */
type NoneInvented<P, Wire> = [Invented<P, Wire>] extends [never] ? true : Invented<P, Wire>;

const checks: Record<string, true> = {
  output: true satisfies NoneInvented<T.Output, W.WireOutput>,
  limits: true satisfies NoneInvented<T.Limits, W.WireLimits>,
  usage: true satisfies NoneInvented<T.Usage, W.WireUsage>,
  templateRef: true satisfies NoneInvented<T.TemplateRef, W.WireTemplateRef>,
  runResult: true satisfies NoneInvented<T.RunResult, W.WireRunResult>,
  command: true satisfies NoneInvented<T.Command, W.WireCommand>,
  sandboxInfo: true satisfies NoneInvented<T.SandboxInfo, W.WireSandbox>,
  forkedFrom: true satisfies NoneInvented<T.ForkedFrom, W.WireForkedFrom>,
  snapshot: true satisfies NoneInvented<T.Snapshot, W.WireSnapshot>,
  template: true satisfies NoneInvented<T.Template, W.WireTemplate>,
  templateFile: true satisfies NoneInvented<T.TemplateFile, W.WireTemplateFile>,
  fileInfo: true satisfies NoneInvented<T.FileInfo, W.WireFileInfo>,
  graphFile: true satisfies NoneInvented<T.GraphFile, W.WireFile>,
};

test("the SDK's records have no field their wire type lacks", () => {
  assert.equal(Object.keys(checks).length, 13);
});
