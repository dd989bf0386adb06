// Writes src/openapi.ts, the API's wire types, from the OpenAPI document
// (internal/api/openapi.json) with openapi-typescript; `--check` writes nothing and fails when
// the committed file is not what the document makes (the TypeScript suite runs it).
// Only the schemas (components) are generated: the SDK names its wire types after them
// (src/wire.ts), and test/server.test.ts checks which schema each route it calls answers.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import openapiTS, { astToString } from "openapi-typescript";

const here = dirname(fileURLToPath(import.meta.url));
const doc = join(here, "..", "..", "..", "internal", "api", "openapi.json");
const out = join(here, "..", "src", "openapi.ts");

const header = "// Generated from internal/api/openapi.json by scripts/openapi-types.mjs (openapi-typescript); do not edit.\n\n";
const { components } = JSON.parse(readFileSync(doc, "utf8"));
const ast = await openapiTS({ openapi: "3.1.0", info: { title: "lbb", version: "" }, paths: {}, components: { schemas: components.schemas } });
const want = header + astToString(ast);

if (process.argv.includes("--check")) {
  if (readFileSync(out, "utf8") !== want) {
    console.error("src/openapi.ts is not what internal/api/openapi.json makes: run `npm run openapi-types`");
    process.exit(1);
  }
} else {
  writeFileSync(out, want);
}
