// lbb's Node context driver: runs inside the sandbox and keeps one REPL evaluation context
// (node's own repl machinery: top-level await, the last expression's value, declarations
// that stay), fed one cell at a time. It speaks the Python driver's protocol: requests on
// stdin ({"id", "code", "timeout_ms"}), events on stdout (stdout, stderr, result, error, end).
"use strict";
const repl = require("node:repl");
const util = require("node:util");
const readline = require("node:readline");
const { PassThrough } = require("node:stream");
const { Console } = require("node:console");
const { spawn } = require("node:child_process");

const rawWrite = process.stdout.write.bind(process.stdout);
const emit = (ev) => rawWrite(JSON.stringify(ev) + "\n");
let current = null; // the id of the cell running
const text = (chunk, enc) => (typeof chunk === "string" ? chunk : Buffer.from(chunk).toString(enc === "buffer" ? "utf8" : enc || "utf8"));
// What the cell writes becomes events; nothing else reaches the channel.
process.stdout.write = (chunk, enc, cb) => {
  emit({ id: current, type: "stdout", text: text(chunk, enc) });
  if (typeof enc === "function") enc();
  else if (typeof cb === "function") cb();
  return true;
};
process.stderr.write = (chunk, enc, cb) => {
  emit({ id: current, type: "stderr", text: text(chunk, enc) });
  if (typeof enc === "function") enc();
  else if (typeof cb === "function") cb();
  return true;
};
globalThis.console = new Console({ stdout: process.stdout, stderr: process.stderr });

const server = repl.start({ input: new PassThrough(), output: new PassThrough(), terminal: false, useGlobal: true, prompt: "", breakEvalOnSigint: true });
// An interrupt ends the cell's synchronous part (breakEvalOnSigint, which works only while no
// other SIGINT listener is there); outside of it, one that comes late must not end the driver.
const ignoreSigint = () => {};
process.on("SIGINT", ignoreSigint);
let count = 0;
// The REPL hands a cell's exception (and one thrown later by what it started) to its domain,
// not to eval's callback: the cell running takes it.
let onError = null;
if (server._domain) {
  server._domain.removeAllListeners("error");
  server._domain.on("error", (e) => {
    if (onError) onError(e);
    else emit({ id: null, type: "stderr", text: "Uncaught " + (e && e.stack ? e.stack : String(e)) + "\n" });
  });
}

function bundle(v) {
  const data = { "text/plain": util.inspect(v, { depth: 4, colors: false }) };
  try {
    if (v !== null && typeof v === "object" && !(v instanceof Error)) {
      const j = JSON.stringify(v);
      if (j !== undefined && j.length < 1 << 20) data["application/json"] = JSON.parse(j);
    }
  } catch {}
  return data;
}

function cell(req) {
  return new Promise((resolve) => {
    current = req.id;
    count++;
    const n = count;
    let done = false;
    let watchdog = null;
    const finish = (status) => {
      if (done) return;
      done = true;
      if (watchdog) watchdog.kill("SIGKILL");
      clearTimeout(timer);
      emit({ id: req.id, type: "end", status, execution_count: n });
      current = null;
      resolve();
    };
    const ms = req.timeout_ms || 0;
    // A synchronous loop blocks this thread: a helper process interrupts it with SIGINT.
    if (ms > 0) watchdog = spawn("sh", ["-c", `sleep ${ms / 1000}; kill -INT ${process.pid}`], { stdio: "ignore" });
    const timer = ms > 0 ? setTimeout(() => {
      emit({ id: req.id, type: "error", name: "TimeoutError", value: `the cell passed its timeout of ${ms} ms`, traceback: [] });
      finish("timeout");
    }, ms + 200) : null;
    const failed = (err) => {
      const interrupted = /Script execution (was )?interrupted/.test(String(err && err.message));
      const name = interrupted ? "TimeoutError" : (err && err.name) || "Error";
      const value = interrupted ? `the cell passed its timeout of ${ms} ms` : err && err.message !== undefined ? String(err.message) : String(err);
      const stack = err && typeof err.stack === "string" ? err.stack.split("\n") : [];
      emit({ id: req.id, type: "error", name, value, traceback: stack });
      finish(interrupted ? "timeout" : "error");
    };
    onError = (e) => {
      if (!done) failed(e);
    };
    process.removeListener("SIGINT", ignoreSigint);
    server.eval(req.code, server.context, "cell", (err, result) => {
      if (done) return;
      if (err) {
        failed(err);
        return;
      }
      if (result !== undefined) emit({ id: req.id, type: "result", data: bundle(result), execution_count: n });
      finish("ok");
    });
    process.on("SIGINT", ignoreSigint);
  });
}

const rl = readline.createInterface({ input: process.stdin, terminal: false });
const queue = [];
let busy = false;
async function pump() {
  if (busy) return;
  busy = true;
  while (queue.length) await cell(queue.shift());
  busy = false;
  if (closed) process.exit(0);
}
rl.on("line", (line) => {
  line = line.trim();
  if (!line) return;
  let req;
  try {
    req = JSON.parse(line);
  } catch (e) {
    emit({ type: "fatal", value: "a request that is not JSON: " + e.message });
    return;
  }
  queue.push(req);
  pump();
});
let closed = false;
rl.on("close", () => {
  closed = true;
  if (!busy) process.exit(0);
});
emit({ type: "ready", pid: process.pid });
