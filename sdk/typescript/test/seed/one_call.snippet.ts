// Added by the tests, not part of the seed: `lbb` from the environment that the "Four ways in"
// sample reads. Only the text between the markers is the seed's.
import { LbbClient } from "@littlebigbrain/client";

const lbb = new LbbClient({ baseUrl: process.env.ENDPOINT_URL!, apiKey: process.env.API_KEY!, graph: "main" });

// ---- seed 000, as written: ----
// In your product, a model writes this code.
const code = `
def run(input, config):
    return sum(input)
`;

const { result } = await lbb.sandboxes.run({ code, input: [1, 2, 3] });
// result is 6
// ---- end of the seed's text ----

// Added by the tests: what they check.
export { lbb, result };
