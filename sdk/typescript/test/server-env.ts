/** The server the harness started (or the one LBB_TEST_URL names) for the server tests. */

import type { TestContext } from "node:test";

export interface TestServer {
  url: string;
  key: string;
}

/** The test server, or undefined after marking the test skipped with the reason. */
export function testServer(t: TestContext): TestServer | undefined {
  const url = process.env.LBB_TEST_URL;
  if (!url) {
    t.skip(process.env.LBB_TEST_SKIP ?? "no server: run the suite with `node dist/test/harness.js` (make test-sdk), or set LBB_TEST_URL and LBB_TEST_API_KEY");
    return undefined;
  }
  return { url: url.replace(/\/+$/, ""), key: process.env.LBB_TEST_API_KEY ?? "" };
}

/** Sets the environment the seed's samples read. */
export function seedEnv(s: TestServer): void {
  process.env.ENDPOINT_URL = s.url;
  process.env.API_KEY = s.key;
}
