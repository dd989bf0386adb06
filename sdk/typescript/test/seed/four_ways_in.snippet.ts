// Added by the tests, not part of the seed: "Four ways in" runs the `code` of the samples above
// it on the page. Only the text between the markers is the seed's.
const code = `
def run(input, config):
    return sum(input)
`;

// ---- seed 000, as written: ----
import { LbbClient } from "@littlebigbrain/client";

const lbb = new LbbClient({
  baseUrl: process.env.ENDPOINT_URL!,
  apiKey: process.env.API_KEY!,
  graph: "main",
});
const { result } = await lbb.sandboxes.run({ code, input: [1, 2, 3] });
// ---- end of the seed's text ----

// Added by the tests: what they check.
export { lbb, result };
