/**
 * Runs the TypeScript suite against a real `lbb serve` of its own, with the real driver.
 *
 * It starts `$LBB_BIN serve` (default: bin/lbb of this repository) on a free port with a
 * fresh data directory, reads the admin key the server saves, runs every compiled *.test.js
 * with `node --test` (the server tests find it through LBB_TEST_URL and LBB_TEST_API_KEY),
 * and stops the server by its pid. The base image comes from $LBB_IMAGES_DIR, else
 * $LBB_DATA_DIR/images, else /var/lib/lbb/images. The ns driver needs root: when not root the
 * server tests skip and say so. With LBB_TEST_URL already set, it uses that server.
 * Its exit status is node --test's.
 */

import { spawn, type ChildProcess } from "node:child_process";
import { chmodSync, existsSync, mkdtempSync, openSync, readFileSync, readdirSync, rmSync, accessSync, constants } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url)); // dist/test
const repo = resolve(here, "..", "..", "..", "..");

function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.on("error", fail);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => ok(port));
    });
  });
}

function tail(path: string, n = 40): string {
  try {
    return readFileSync(path, "utf8").split("\n").slice(-n).join("\n");
  } catch {
    return "";
  }
}

async function startServer(): Promise<{ proc: ChildProcess; url: string; key: string; dataDir: string; log: string }> {
  const bin = process.env.LBB_BIN || join(repo, "bin", "lbb");
  try {
    accessSync(bin, constants.X_OK);
  } catch {
    throw new Error(`no lbb binary at ${bin}: run \`make build\` or set LBB_BIN`);
  }
  const dataDir = mkdtempSync(join(tmpdir(), "lbb-sdk-ts-"));
  // The sandbox's user namespace must be able to reach its layer under the data directory.
  chmodSync(dataDir, 0o755);
  const images = process.env.LBB_IMAGES_DIR || join(process.env.LBB_DATA_DIR || "/var/lib/lbb", "images");
  const addr = `127.0.0.1:${await freePort()}`;
  const log = join(dataDir, "server.log");
  const fd = openSync(log, "w");
  const env = { ...process.env };
  for (const k of ["LBB_ADDR", "LBB_DATA_DIR", "LBB_URL", "LBB_API_KEY"]) delete env[k];
  const proc = spawn(bin, ["serve", "--addr", addr, "--preview-addr", "127.0.0.1:0", "--data-dir", dataDir, "--images-dir", images, "--shutdown-grace", "5s"], {
    stdio: ["ignore", fd, fd],
    env,
  });
  const url = `http://${addr}`;
  const deadline = Date.now() + Number(process.env.LBB_TEST_START_TIMEOUT ?? "300") * 1000;
  const keyPath = join(dataDir, "admin.key");
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`lbb serve exited with ${proc.exitCode} before serving:\n${tail(log)}`);
    if (Date.now() > deadline) {
      await stopServer(proc);
      throw new Error(`lbb serve did not come up on ${addr}:\n${tail(log)}`);
    }
    if (existsSync(keyPath)) {
      try {
        if ((await fetch(`${url}/healthz`)).ok) break;
      } catch {
        // not yet listening
      }
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return { proc, url, key: readFileSync(keyPath, "utf8").trim(), dataDir, log };
}

/** Stops our server by its pid: SIGTERM, then SIGKILL after a minute. */
async function stopServer(proc: ChildProcess): Promise<void> {
  if (proc.exitCode !== null || proc.pid === undefined) return;
  const done = new Promise<void>((r) => proc.once("exit", () => r()));
  process.kill(proc.pid, "SIGTERM");
  const timer = setTimeout(() => proc.pid !== undefined && proc.exitCode === null && process.kill(proc.pid, "SIGKILL"), 60_000);
  await done;
  clearTimeout(timer);
}

async function main(): Promise<number> {
  const files = readdirSync(here)
    .filter((f) => f.endsWith(".test.js"))
    .sort()
    .map((f) => join(here, f));
  const env: NodeJS.ProcessEnv = { ...process.env };
  let server: Awaited<ReturnType<typeof startServer>> | undefined;
  if (process.env.LBB_TEST_URL) {
    // a server the caller runs
  } else if (process.getuid?.() !== 0) {
    env.LBB_TEST_SKIP = "RequiresRoot: the server tests run a real `lbb serve` with the ns driver, which needs root";
  } else {
    try {
      server = await startServer();
    } catch (e) {
      console.error(`harness: ${(e as Error).message}`);
      return 1;
    }
    env.LBB_TEST_URL = server.url;
    env.LBB_TEST_API_KEY = server.key;
    env.LBB_TEST_SERVER_LOG = server.log;
  }
  const stop = async () => {
    if (server) await stopServer(server.proc);
  };
  for (const sig of ["SIGINT", "SIGTERM"] as const) {
    process.once(sig, () => void stop().then(() => process.exit(130)));
  }
  const child = spawn(process.execPath, ["--test", "--test-concurrency=1", "--test-timeout=300000", ...files], { env, stdio: "inherit" });
  const code = await new Promise<number>((r) => child.once("exit", (c, s) => r(c ?? (s ? 1 : 0))));
  await stop();
  if (server) {
    if (code !== 0) console.error(`harness: lbb serve log (tail):\n${tail(server.log, 20)}`);
    if (process.env.LBB_TEST_KEEP) console.error(`harness: server data kept in ${server.dataDir}`);
    else rmSync(server.dataDir, { recursive: true, force: true });
  }
  return code;
}

process.exitCode = await main();
