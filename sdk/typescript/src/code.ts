/**
 * The code interpreter: stateful contexts in a long-lived sandbox (`sandbox.code`), where
 * variables, imports and functions stay from one cell to the next and the value of the last
 * expression is a result, like a notebook's cell. A Python context is a Jupyter kernel.
 */

import { LbbError } from "./errors.js";
import type { ServerSentEvent } from "./sse.js";
import type { Transport } from "./client.js";
import type { WireCodeContext, WireCodeOutput, WireCodeResult, WireList } from "./wire.js";

/** A result or display of a cell: MIME type → value ("text/plain", "text/html", "image/png" as base64, …). */
export interface CodeOutput {
  type: "result" | "display";
  data: Record<string, unknown>;
  executionCount?: number;
  /** MIME type → the File of the graph (`fil_…`) that keeps this image. */
  files?: Record<string, string>;
}

/** An exception a cell raised. */
export interface CodeError {
  name: string;
  value: string;
  traceback: string[];
}

/** How a cell went. A cell that raises is an answer (error), not a thrown error. */
export interface CodeResult {
  /** The cell's command record (`cmd_…`, kind code). */
  command: string;
  context: string;
  sandbox: string;
  status: string;
  executionCount: number | null;
  stdout: string;
  stderr: string;
  results: CodeOutput[];
  error?: CodeError;
  durationMs: number;
  /** The context's interpreter had ended (the sandbox was stopped) and this cell started a fresh one. */
  contextRestarted?: boolean;
  /** The text/plain of the last result or display, "" when none. */
  text: string;
}

/** A context: a stateful interpreter in a sandbox. */
export interface CodeContext {
  id: string;
  sandbox: string;
  language: string;
  cwd?: string;
  envNames?: string[];
  status: string;
  createdAt: string;
  restarts: number;
  /** In a fork: the source's context this one is a copy of (same state at the fork). */
  forkedFrom?: string;
}

export interface RunCellOptions {
  /** The context (`ctx_…`); without it the sandbox's default context of language. */
  context?: string;
  language?: string;
  /** The cell is interrupted at this timeout; the context lives on. */
  timeoutMs?: number;
  idempotencyKey?: string;
  signal?: AbortSignal;
  /** With any of these the answer streams: each gets its events as the cell makes them. */
  onStdout?: (text: string) => unknown;
  onStderr?: (text: string) => unknown;
  onResult?: (out: CodeOutput) => unknown;
  onError?: (err: CodeError) => unknown;
}

export interface CreateContextParams {
  language?: string;
  cwd?: string;
  env?: Record<string, string>;
  signal?: AbortSignal;
}

function toOutput(w: WireCodeOutput): CodeOutput {
  const o: CodeOutput = { type: w.type, data: (w.data ?? {}) as Record<string, unknown> };
  if (w.execution_count !== undefined) o.executionCount = w.execution_count;
  if (w.files) o.files = w.files;
  return o;
}

function toCodeResult(w: WireCodeResult): CodeResult {
  const results = (w.results ?? []).map(toOutput);
  let text = "";
  for (let i = results.length - 1; i >= 0 && text === ""; i--) {
    const t = results[i]!.data["text/plain"];
    if (typeof t === "string") text = t;
  }
  const r: CodeResult = {
    command: w.command,
    context: w.context,
    sandbox: w.sandbox,
    status: w.status,
    executionCount: w.execution_count ?? null,
    stdout: w.stdout,
    stderr: w.stderr,
    results,
    durationMs: w.duration_ms,
    text,
  };
  if (w.error) r.error = w.error;
  if (w.context_restarted) r.contextRestarted = true;
  return r;
}

function toContext(w: WireCodeContext): CodeContext {
  const c: CodeContext = { id: w.id, sandbox: w.sandbox, language: w.language, status: w.status, createdAt: w.created_at, restarts: w.restarts };
  if (w.cwd) c.cwd = w.cwd;
  if (w.env_names) c.envNames = w.env_names;
  if (w.forked_from) c.forkedFrom = w.forked_from;
  return c;
}

/** The code interpreter of one sandbox: `sandbox.code`. */
export class SandboxCode {
  constructor(
    private readonly t: Transport,
    readonly sandboxId: string,
  ) {}

  private path(rest: string): string {
    return `/v1/sandboxes/${encodeURIComponent(this.sandboxId)}${rest}`;
  }

  /**
   * Runs a cell. `await sb.code.run("x = 1")`, then `(await sb.code.run("x + 1")).text` is "2".
   * With onStdout, onStderr, onResult or onError the answer streams and they get its events as
   * they come; the promise answers the whole result either way.
   */
  async run(code: string, o: RunCellOptions = {}): Promise<CodeResult> {
    const body: Record<string, unknown> = { code };
    if (o.context !== undefined) body.context = o.context;
    if (o.language !== undefined) body.language = o.language;
    if (o.timeoutMs !== undefined) body.timeout_ms = o.timeoutMs;
    if (!(o.onStdout || o.onStderr || o.onResult || o.onError)) {
      const w = await this.t.json<WireCodeResult>("POST", this.path("/code"), { json: body, idempotencyKey: o.idempotencyKey, signal: o.signal });
      return toCodeResult(w);
    }
    const events = this.t.events(this.path("/code"), {}, o.signal, { json: { ...body, stream: true }, idempotencyKey: o.idempotencyKey });
    for await (const ev of events as AsyncIterable<ServerSentEvent>) {
      const data = ev.data ? JSON.parse(ev.data) : {};
      switch (ev.event) {
        case "stdout":
          await o.onStdout?.(data.text);
          break;
        case "stderr":
          await o.onStderr?.(data.text);
          break;
        case "result":
        case "display":
          await o.onResult?.(toOutput(data));
          break;
        case "error":
          if (data.error) throw new LbbError(data.error.message ?? "the cell's stream failed");
          await o.onError?.(data as CodeError);
          break;
        case "end":
          return toCodeResult(data as WireCodeResult);
      }
    }
    throw new LbbError("the cell's stream ended without its end event");
  }

  /** Starts a context and answers once its interpreter is ready. */
  async createContext(p: CreateContextParams = {}): Promise<CodeContext> {
    const body: Record<string, unknown> = {};
    if (p.language !== undefined) body.language = p.language;
    if (p.cwd !== undefined) body.cwd = p.cwd;
    if (p.env !== undefined) body.env = p.env;
    return toContext(await this.t.json<WireCodeContext>("POST", this.path("/contexts"), { json: body, signal: p.signal }));
  }

  /** The sandbox's contexts, oldest first. */
  async contexts(o: { signal?: AbortSignal } = {}): Promise<CodeContext[]> {
    const l = await this.t.json<WireList<WireCodeContext>>("GET", this.path("/contexts"), { signal: o.signal });
    return l.data.map(toContext);
  }

  /** Starts a context's interpreter afresh: its state is gone. */
  async restartContext(id: string, o: { signal?: AbortSignal } = {}): Promise<CodeContext> {
    return toContext(await this.t.json<WireCodeContext>("POST", this.path(`/contexts/${encodeURIComponent(id)}/restart`), { signal: o.signal }));
  }

  /** Ends a context. */
  async deleteContext(id: string, o: { signal?: AbortSignal } = {}): Promise<CodeContext> {
    return toContext(await this.t.json<WireCodeContext>("DELETE", this.path(`/contexts/${encodeURIComponent(id)}`), { signal: o.signal }));
  }
}
