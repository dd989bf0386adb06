// Added by the tests, not part of the seed: `lbb` from the environment that the "Four ways in"
// sample reads. Only the text between the markers is the seed's.
import { LbbClient } from "@littlebigbrain/client";

const lbb = new LbbClient({ baseUrl: process.env.ENDPOINT_URL!, apiKey: process.env.API_KEY!, graph: "main" });

// ---- seed 000, as written: ----
const csv = "1,2\n3,4\n";
const countLines = `
def run(input, config):
    return len(open(input["file"]).read().splitlines())
`;
const upperPy = `
print(open("data.csv").read().upper())
`;

const out = await lbb.sandboxes.scoped({}, async (sb) => {
  await sb.files.write("data.csv", csv);
  await sb.files.write("upper.py", upperPy);
  const rows = await sb.run({ code: countLines, input: { file: "data.csv" } });
  const upper = await sb.commands.create({
    argv: ["python", "upper.py"],
    waitMs: 30_000,
  });
  return { lines: rows.result, upper: upper.stdout.tail };
});
// ---- end of the seed's text ----

// ---- seed 000, as written: ----
const sb = await lbb.sandboxes.create({ expiresInSeconds: 600 });
await sb.files.write("data.csv", csv);
await sb.stop();    // the disk stays
await sb.resume();
await sb.delete();
// ---- end of the seed's text ----

// Added by the tests: what they check.
export { lbb, out, sb };
