// lbb run() harness for Node, run as `node -e` by the guest agent.
// fd 3: the request JSON {"code", "input", "config"}; fd 4: the status line, then the result.
// The code is compiled as CommonJS first (a top-level function run, module.exports.run,
// module.exports = fn); when that fails on ES module syntax, it is imported as an ES module
// from a temporary .mjs in the working directory, so that its relative imports resolve
// (export function run, export default).
// Pre-started (`node -e HARNESS -- --lbb-prestart MODULE…`): require the modules, write "ready\n"
// on fd 4, then wait for the request, which also carries "cwd" and "env". Math.random cannot
// be reseeded (V8 has no API for it): it was seeded from the kernel when this process started.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const vm = require('vm');
const { createRequire } = require('module');
const { pathToFileURL } = require('url');
const { inspect } = require('util');

const warm = process.argv[1] === '--lbb-prestart';
if (warm) {
  for (const m of process.argv.slice(2)) {
    try {
      require(m);
    } catch {}
  }
  process.argv.splice(1);
  // Writes to pipes are synchronous on Linux: nothing written before is still pending.
  fs.writeSync(4, 'ready\n');
}
const req = JSON.parse(fs.readFileSync(3, 'utf8'));
fs.closeSync(3);
if (warm) {
  if (req.env) Object.assign(process.env, req.env);
  if (req.cwd) process.chdir(req.cwd);
}

// finish writes the status line (which says the exit code) and the result, then exits. The
// last 'exit' listener closes stdout, stderr and fd 4: the agent reports the run then,
// without waiting for the process to finish dying (milliseconds for node).
function finish(head, body) {
  const buf = Buffer.from(JSON.stringify(head) + '\n' + (body === undefined ? '' : body), 'utf8');
  let off = 0;
  while (off < buf.length) off += fs.writeSync(4, buf, off);
  process.on('exit', () => {
    for (const fd of [1, 2, 4]) {
      try {
        fs.closeSync(fd);
      } catch {}
    }
  });
  process.exit(head.exit);
}

function isError(e) {
  return e !== null && typeof e === 'object' && typeof e.stack === 'string';
}

function errLine(e) {
  if (isError(e)) {
    const name = e.name || 'Error';
    return e.message ? `${name}: ${e.message}` : name;
  }
  return 'Uncaught ' + inspect(e);
}

function report(e) {
  let s;
  if (isError(e)) {
    // Drop the harness's own frames and node's internals.
    s = e.stack.split('\n').filter((l) => !/^\s+at\s.*(\[eval\]|node:)/.test(l)).join('\n');
  } else {
    s = 'Uncaught ' + inspect(e);
  }
  process.stderr.write(s + '\n');
}

function fail(msg, e) {
  if (e !== undefined) report(e);
  else process.stderr.write('lbb: ' + msg + '\n');
  finish({ ok: false, error: msg, exit: 1 });
}

function pick(x) {
  if (x === null || x === undefined) return undefined;
  if (typeof x.run === 'function') return x.run;
  if (typeof x === 'function') return x;
  const d = x.default;
  if (typeof d === 'function') return d;
  if (d !== null && d !== undefined && typeof d.run === 'function') return d.run;
  return undefined;
}

const cwd = process.cwd();
const filename = path.join(cwd, '<run>');

function loadCommonJS(code) {
  const params = ['exports', 'require', 'module', '__filename', '__dirname'];
  // So that import() works in CommonJS code (node 20.12 and later).
  const opts = { filename, importModuleDynamically: vm.constants && vm.constants.USE_MAIN_CONTEXT_DEFAULT_LOADER };
  // Compiled alone first, so that a syntax error points into the code, not the line added
  // below to fetch a top-level run.
  vm.compileFunction(code, params, opts);
  const fn = vm.compileFunction(code + '\n;return typeof run === "function" ? run : undefined;', params, opts);
  const mod = { exports: {}, filename, id: filename, paths: [] };
  const top = fn.call(mod.exports, mod.exports, createRequire(filename), mod, filename, cwd);
  return typeof top === 'function' ? top : pick(mod.exports);
}

async function loadModule(code) {
  let file;
  for (const dir of [cwd, os.tmpdir()]) {
    const f = path.join(dir, `.lbb-run-${process.pid}.mjs`);
    try {
      fs.writeFileSync(f, code, { flag: 'wx' });
      file = f;
      break;
    } catch {}
  }
  if (file === undefined) throw new Error('cannot write the module to a temporary file');
  try {
    return pick(await import(pathToFileURL(file).href));
  } finally {
    try {
      fs.unlinkSync(file);
    } catch {}
  }
}

const moduleSyntax = /\b(import|export)\b|await is only valid|outside a module/;

(async () => {
  let run;
  try {
    try {
      run = loadCommonJS(req.code || '');
    } catch (e) {
      if (!(e instanceof SyntaxError && moduleSyntax.test(e.message))) throw e;
      run = await loadModule(req.code || '');
    }
  } catch (e) {
    fail(errLine(e), e);
  }
  if (typeof run !== 'function') {
    fail('the code defines no run(input, config) function: lbb calls run with the input and config ' +
      'and answers what it returns. Put the script in one:\n\n' +
      'function run(input, config) {\n  // the script\n  return result;\n}\n');
  }
  let res;
  try {
    res = await run(req.input === undefined ? null : req.input, req.config == null ? {} : req.config);
  } catch (e) {
    fail(errLine(e), e);
  }
  let body;
  try {
    body = JSON.stringify(res);
  } catch (e) {
    fail('the result is not JSON: ' + (isError(e) ? e.message : String(e)));
  }
  finish({ ok: true, exit: 0 }, body === undefined ? 'null' : body);
})();
