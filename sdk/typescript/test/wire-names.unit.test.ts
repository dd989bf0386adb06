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
/** "Record.field" for each field of P that is not a camelCase field of the wire type. */
type Invented<Name extends string, P, Wire> = `${Name}.${Exclude<keyof P, Camel<keyof Wire & string> | "raw"> & string}`;

type All =
  | Invented<"Output", T.Output, W.WireOutput> | Invented<"Limits", T.Limits, W.WireLimits> | Invented<"Usage", T.Usage, W.WireUsage>
  | Invented<"TemplateRef", T.TemplateRef, W.WireTemplateRef> | Invented<"RunResult", T.RunResult, W.WireRunResult>
  | Invented<"Command", T.Command, W.WireCommand> | Invented<"SandboxInfo", T.SandboxInfo, W.WireSandbox>
  | Invented<"ForkedFrom", T.ForkedFrom, W.WireForkedFrom> | Invented<"Snapshot", T.Snapshot, W.WireSnapshot>
  | Invented<"Template", T.Template, W.WireTemplate> | Invented<"TemplateFile", T.TemplateFile, W.WireTemplateFile>
  | Invented<"FileInfo", T.FileInfo, W.WireFileInfo> | Invented<"GraphFile", T.GraphFile, W.WireFile>;

// Fails to compile, naming them, when there are invented fields.
const none: [All] extends [never] ? true : All = true;

test("the SDK's records have no field their wire type lacks", () => {
  assert.equal(none, true);
});
