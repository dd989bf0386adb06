// Added by the tests, not part of the seed: `lbb` from the environment that the "Four ways in"
// sample reads. Only the text between the markers is the seed's.
import { LbbClient } from "@littlebigbrain/client";

const lbb = new LbbClient({ baseUrl: process.env.ENDPOINT_URL!, apiKey: process.env.API_KEY!, graph: "main" });

// ---- seed 000, as written: ----
const code = `
def run(input, config):
    return sum(input)
`;

const run = await lbb.sandboxes.run({ code, input: [1, 2, 3] });
run.ok;       // true when the code exited with code 0
run.result;   // 6
run.command;  // "cmd_…", the record of this run
// ---- end of the seed's text ----

// ---- seed 000, as written: ----
await lbb.sandboxes.templates.create({
  name: "normalize",
  base: "lbb/python",
  code,
  limits: { memoryMib: 2048 },
  commandTimeoutMs: 60_000,
  config: { unit: "cm" },
});

await lbb.sandboxes.run({ template: "normalize", input: [1, 2, 3] });
// ---- end of the seed's text ----

// Added by the tests: what they check.
export { lbb, run };
