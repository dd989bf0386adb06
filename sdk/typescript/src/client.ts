/**
 * The client: `new LbbClient({ baseUrl, apiKey, graph })`, on the platform's fetch.
 */

import {
  APIConnectionError,
  APITimeoutError,
  LbbError,
  NotFoundError,
  OutputLostError,
  errorFromBody,
} from "./errors.js";
import { SSEDecoder, lines, type ServerSentEvent } from "./sse.js";
import { SandboxCode } from "./code.js";
import { SandboxPty } from "./terminal.js";
import {
  DONE_STATUSES,
  fromEgress,
  fromLimits,
  runFromCommand,
  toCommand,
  toFileInfo,
  toGraphFile,
  toPage,
  toQuotas,
  toRunResult,
  toSandboxInfo,
  toSnapshot,
  toTemplate,
  type APIGrant,
  type Command,
  type CommandResult,
  type Egress,
  type FileInfo,
  type GitClone,
  type GraphFile,
  type Limits,
  type Page,
  type Quotas,
  type RunResult,
  type SandboxInfo,
  type Snapshot,
  type Template,
  type TemplateFile,
} from "./types.js";
import type {
  WireBudget,
  WireCommand,
  WireCreateSandboxRequest,
  WireGrant,
  WireGrantRequest,
  WireUsageReport,
  WireWorkflowBudget,
  WireForkRequest,
  WireQuotas,
  WireRunBody,
  WireRunResult,
  WireSandbox,
  WirePreview,
  WirePreviewRequest,
  WireSnapshot,
  WireSnapshotRequest,
  WireImageRecipe,
  WireTemplate,
  WireTemplateBuildView,
  WireTemplateRequest,
} from "./wire.js";

export const VERSION = "0.1.0";
const DEFAULT_BASE_URL = "http://127.0.0.1:7700";
const DEFAULT_TIMEOUT_MS = 120_000;
const DEFAULT_MAX_RETRIES = 3;
/** How long one long-poll of GET /v1/commands/{id} asks the server to wait. */
const POLL_WAIT_MS = 30_000;
/** Statuses worth a retry of the same request (and Idempotency-Key). */
const RETRY_STATUSES = new Set([429, 502, 503, 504]);
/** Methods that change state: each logical call gets one Idempotency-Key, kept on its retries. */
const MUTATING = new Set(["POST", "PUT", "PATCH", "DELETE"]);

export interface ClientOptions {
  /** Default: $LBB_URL, then http://127.0.0.1:7700. */
  baseUrl?: string;
  /** Default: $LBB_API_KEY, then (for a local server) the admin key it saved in $LBB_DATA_DIR/admin.key. */
  apiKey?: string;
  /** Default: $LBB_GRAPH, then "main". */
  graph?: string;
  /** How long one request may take, unless it waits longer on the server (wait_ms). Default 120 s. */
  timeoutMs?: number;
  /** Retries of a call that could not connect or got 429, 502, 503 or 504. Default 3. */
  maxRetries?: number;
  /** Headers sent with every request. */
  headers?: Record<string, string>;
  /** The fetch to use; default the platform's. */
  fetch?: typeof fetch;
}

/** JSON values. */
export type Json = unknown;
export type Data = string | Uint8Array | ArrayBuffer;

interface RequestOptions {
  /** An array value repeats the parameter (?label=a&label=b). */
  query?: Record<string, string | number | boolean | string[] | undefined | null>;
  json?: unknown;
  body?: string | Uint8Array | ArrayBuffer;
  headers?: Record<string, string>;
  idempotencyKey?: string | undefined;
  /** A server-side wait the read must outlast. */
  waitMs?: number | undefined;
  graph?: boolean;
  signal?: AbortSignal | undefined;
  /** false: never send the request twice (a write that is not idempotent). */
  retry?: boolean;
}

function env(name: string): string | undefined {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  const v = p?.env?.[name];
  return v ? v : undefined;
}

function isLocal(url: string): boolean {
  try {
    return ["127.0.0.1", "localhost", "[::1]"].includes(new URL(url).hostname);
  } catch {
    return false;
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const t = setTimeout(resolve, ms);
    signal?.addEventListener(
      "abort",
      () => {
        clearTimeout(t);
        reject(signal.reason);
      },
      { once: true },
    );
  });
}

/** Milliseconds before retry number attempt+1: Retry-After when given (up to 30 s), else exponential with jitter. */
export function backoffMs(attempt: number, retryAfter?: string | null): number {
  if (retryAfter) {
    const s = Number(retryAfter);
    if (Number.isFinite(s)) return Math.min(Math.max(s, 0), 30) * 1000;
  }
  return Math.min(8000, 250 * 2 ** attempt) * (0.5 + Math.random() / 2);
}

function newIdempotencyKey(): string {
  return globalThis.crypto.randomUUID();
}

/** o without its undefined fields, so the server applies its defaults. */
function compact<T extends object>(o: T): T {
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) out[k] = v;
  return out as T;
}

function toBody(data: Data): string | Uint8Array {
  return data instanceof ArrayBuffer ? new Uint8Array(data) : data;
}

/** Sends requests: auth, graph, Idempotency-Key, retries and typed errors. */
export class Transport {
  readonly baseUrl: string;
  readonly graph: string;
  private apiKey: string | undefined;
  private keyLoaded: boolean;
  readonly timeoutMs: number;
  private readonly maxRetries: number;
  private readonly headers: Record<string, string>;
  private readonly fetch: typeof fetch;

  constructor(o: ClientOptions) {
    this.baseUrl = (o.baseUrl ?? env("LBB_URL") ?? DEFAULT_BASE_URL).replace(/\/+$/, "");
    this.apiKey = o.apiKey ?? env("LBB_API_KEY");
    this.keyLoaded = this.apiKey !== undefined || !isLocal(this.baseUrl);
    this.graph = o.graph ?? env("LBB_GRAPH") ?? "main";
    this.timeoutMs = o.timeoutMs ?? DEFAULT_TIMEOUT_MS;
    this.maxRetries = o.maxRetries ?? DEFAULT_MAX_RETRIES;
    this.headers = { "User-Agent": `lbb-typescript/${VERSION}`, ...o.headers };
    const f = o.fetch ?? globalThis.fetch;
    if (!f) throw new LbbError("no fetch: use Node 20 or later, or pass options.fetch");
    this.fetch = f.bind(globalThis);
  }

  /** The saved admin key of a local server, read once (DESIGN.md section 5). */
  private async key(): Promise<string | undefined> {
    if (!this.keyLoaded) {
      this.keyLoaded = true;
      try {
        const fs = await import("node:fs/promises");
        const dir = env("LBB_DATA_DIR") ?? "/var/lib/lbb";
        this.apiKey = (await fs.readFile(`${dir}/admin.key`, "utf8")).trim() || undefined;
      } catch {
        // not on Node, or no saved key: the server answers 401
      }
    }
    return this.apiKey;
  }

  url(path: string, query: RequestOptions["query"], graph = true): string {
    const u = new URL(this.baseUrl + path);
    if (graph) u.searchParams.set("graph", this.graph);
    for (const [k, v] of Object.entries(query ?? {})) {
      if (Array.isArray(v)) for (const x of v) u.searchParams.append(k, x);
      else if (v !== undefined && v !== null) u.searchParams.set(k, String(v));
    }
    return u.toString();
  }

  /** The WebSocket URL of a sandbox's terminal (GET /v1/sandboxes/{id}/pty). */
  terminalUrl(sandboxId: string, query: [string, string][]): string {
    const u = new URL(this.url(`/v1/sandboxes/${encodeURIComponent(sandboxId)}/pty`, undefined));
    for (const [k, v] of query) u.searchParams.append(k, v);
    u.protocol = u.protocol === "https:" ? "wss:" : "ws:";
    return u.toString();
  }

  /** The headers of every call (User-Agent, Authorization), for the terminals' WebSocket. */
  authHeaders(): Promise<Record<string, string>> {
    return this.baseHeaders();
  }

  private async baseHeaders(): Promise<Record<string, string>> {
    const h: Record<string, string> = { Accept: "application/json", ...this.headers };
    const key = await this.key();
    if (key) h.Authorization = `Bearer ${key}`;
    return h;
  }

  async request(method: string, path: string, o: RequestOptions = {}): Promise<Response> {
    const url = this.url(path, o.query, o.graph ?? true);
    const headers = { ...(await this.baseHeaders()), ...o.headers };
    let body: string | Uint8Array | undefined;
    if (o.json !== undefined) {
      body = JSON.stringify(o.json);
      headers["Content-Type"] = "application/json";
    } else if (o.body !== undefined) {
      body = toBody(o.body);
    }
    if (MUTATING.has(method)) {
      // One key per logical call, the same on every retry of it: the server runs the code at most once for it.
      headers["Idempotency-Key"] = o.idempotencyKey ?? newIdempotencyKey();
    }
    const timeout = o.waitMs === undefined ? this.timeoutMs : Math.max(this.timeoutMs, o.waitMs + 30_000);
    const maxRetries = o.retry === false ? 0 : this.maxRetries;
    for (let attempt = 0; ; attempt++) {
      const timer = AbortSignal.timeout(timeout);
      const signal = o.signal && typeof AbortSignal.any === "function" ? AbortSignal.any([o.signal, timer]) : (o.signal ?? timer);
      let resp: Response;
      let answer: Uint8Array;
      try {
        resp = await this.fetch(url, { method, headers, body: body as RequestInit["body"], signal });
        // The whole answer is read here, so that a connection that breaks in the middle of it
        // is retried (with the same key) like one that broke before it, and never surfaces as
        // the platform's bare TypeError from a later body read.
        answer = new Uint8Array(await resp.arrayBuffer());
      } catch (e) {
        if (o.signal?.aborted) throw e;
        const timedOut = timer.aborted;
        if (attempt >= maxRetries) {
          const Cls = timedOut ? APITimeoutError : APIConnectionError;
          throw new Cls(`${method} ${path}: ${timedOut ? `no answer in ${timeout} ms` : describe(e)}`, {
            code: "connection_error",
            cause: e,
          });
        }
        await sleep(backoffMs(attempt), o.signal);
        continue;
      }
      if (RETRY_STATUSES.has(resp.status) && attempt < maxRetries && !fullQuota(resp.status, answer)) {
        await sleep(backoffMs(attempt, resp.headers.get("retry-after")), o.signal);
        continue;
      }
      if (resp.status >= 400) {
        throw errorFromBody(resp.status, new TextDecoder().decode(answer), resp.headers.get("request-id"));
      }
      const nullBody = resp.status === 204 || resp.status === 205 || resp.status === 304;
      return new Response(nullBody ? null : answer, { status: resp.status, statusText: resp.statusText, headers: resp.headers });
    }
  }

  async json<T>(method: string, path: string, o: RequestOptions = {}): Promise<T> {
    const resp = await this.request(method, path, o);
    const text = await resp.text();
    return (text.trim() ? JSON.parse(text) : {}) as T;
  }

  /**
   * Reads a server-sent event stream. After a broken connection it reconnects with
   * Last-Event-ID, so no event comes twice; it gives up when the server sent no ids.
   */
  async *events(
    path: string,
    query: RequestOptions["query"],
    signal?: AbortSignal,
    start?: { json: unknown; idempotencyKey?: string | undefined },
  ): AsyncGenerator<ServerSentEvent> {
    const url = this.url(path, query);
    let lastId: string | undefined;
    // A stream that a POST starts is resumed by the same POST, with the same Idempotency-Key.
    const idempotencyKey = start ? (start.idempotencyKey ?? newIdempotencyKey()) : undefined;
    for (let attempt = 0; ; ) {
      const headers: Record<string, string> = { ...(await this.baseHeaders()), Accept: "text/event-stream" };
      if (lastId !== undefined) headers["Last-Event-ID"] = lastId;
      const init: RequestInit = { headers, ...(signal ? { signal } : {}) };
      if (start) {
        headers["Content-Type"] = "application/json";
        headers["Idempotency-Key"] = idempotencyKey!;
        init.method = "POST";
        init.body = JSON.stringify(start.json);
      }
      const dec = new SSEDecoder();
      let resp: Response;
      try {
        resp = await this.fetch(url, init);
      } catch (e) {
        if (signal?.aborted || attempt >= this.maxRetries) {
          throw new APIConnectionError(`GET ${path}: ${describe(e)}`, { code: "connection_error", cause: e });
        }
        await sleep(backoffMs(attempt++), signal);
        continue;
      }
      if (resp.status >= 400) {
        const text = await resp.text();
        if (RETRY_STATUSES.has(resp.status) && attempt < this.maxRetries) {
          await sleep(backoffMs(attempt++, resp.headers.get("retry-after")), signal);
          continue;
        }
        throw errorFromBody(resp.status, text, resp.headers.get("request-id"));
      }
      if (!resp.body) return;
      try {
        for await (const line of lines(resp.body as AsyncIterable<Uint8Array>)) {
          const ev = dec.feed(line);
          if (dec.lastId !== undefined) lastId = dec.lastId;
          if (ev) {
            attempt = 0;
            yield ev;
          }
        }
        const last = dec.feed(""); // a last event the server did not end with a blank line
        if (last) yield last;
        return;
      } catch (e) {
        if (signal?.aborted) throw e;
        if (lastId === undefined || attempt >= this.maxRetries) {
          throw new APIConnectionError(`GET ${path}: the stream broke: ${describe(e)}`, { code: "connection_error", cause: e });
        }
        await sleep(backoffMs(attempt++), signal);
      }
    }
  }
}

function describe(e: unknown): string {
  if (e instanceof Error) {
    const cause = (e as { cause?: unknown }).cause;
    return cause instanceof Error ? `${e.message}: ${cause.message}` : e.message;
  }
  return String(e);
}

async function waitCommand(t: Transport, id: string, timeoutMs?: number, signal?: AbortSignal): Promise<WireCommand> {
  const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
  for (;;) {
    const waitMs = deadline === undefined ? POLL_WAIT_MS : Math.max(0, Math.min(POLL_WAIT_MS, deadline - Date.now()));
    const cmd = await t.json<WireCommand>("GET", `/v1/commands/${encodeURIComponent(id)}`, { query: { wait_ms: waitMs }, waitMs, signal });
    if (DONE_STATUSES.has(cmd.status) || (deadline !== undefined && Date.now() >= deadline)) return cmd;
  }
}

async function finishRun<R>(t: Transport, resp: Response, wait: boolean, signal?: AbortSignal): Promise<RunResult<R>> {
  let w = (await resp.json()) as WireRunResult;
  if (wait && (resp.status === 202 || w.status === "queued" || w.status === "running") && w.command) {
    w = runFromCommand(w, await waitCommand(t, w.command, undefined, signal));
  }
  return toRunResult<R>(w);
}

/** What every call can take. */
export interface CallOptions {
  signal?: AbortSignal;
}

/** Calls that run code or change state take a key; without one the SDK makes a fresh one per call. */
export interface IdempotentCallOptions extends CallOptions {
  idempotencyKey?: string;
}

/** What a sandbox is made from: the sandbox of a one-call run, or a long-lived one. */
export interface SandboxSpec extends IdempotentCallOptions {
  /** A template: "normalize", or "normalize@3" to pin a version. */
  template?: string;
  /** lbb/python (default), lbb/node or lbb/shell. */
  base?: string;
  limits?: Limits;
  /** "ns" or "gvisor" (pause with memory, snapshots, forks): wins over the template's and the server default. */
  isolation?: string;
  /** The route out: wins over the template's; default none. */
  egress?: Egress;
  env?: Record<string, string>;
  metadata?: Record<string, string>;
  /** The workflow step that made the call, kept in the records. */
  origin?: Origin;
}

export interface RunParams extends SandboxSpec {
  /** Code that defines run(input, config). */
  code?: string;
  /** A plain program of its language instead (no run(input, config)); see Sandboxes.runCode. */
  script?: string;
  input?: Json;
  /** Merged over the template's config. */
  config?: Json;
  /** Shorthand for base: "python", "node" or "shell". */
  language?: string;
  timeoutMs?: number;
  /** How long the server waits for the run before it answers 202; the SDK then waits on the command. */
  waitMs?: number;
  /** false: answer as soon as the server does, even if the run has not ended. Default true. */
  wait?: boolean;
}

export interface RunCodeParams extends Omit<RunParams, "code" | "template" | "input" | "config" | "script" | "base"> {
  /** The program. */
  code: string;
  /** python (the default), node or shell. */
  language?: string;
}

export type SandboxRunParams = Omit<RunParams, "base" | "language" | "limits" | "isolation" | "egress" | "metadata" | "origin">;

export interface Origin {
  workflow?: string;
  run?: string;
  step?: string;
}

function runBody(p: RunParams | SandboxRunParams): WireRunBody {
  const q = p as RunParams;
  if (p.code !== undefined && p.template !== undefined) throw new TypeError("run takes code or template, not both");
  if (p.code === undefined && p.template === undefined && q.script === undefined) throw new TypeError("run needs code or template");
  return compact<WireRunBody>({
    code: p.code,
    script: q.script,
    template: p.template,
    input: p.input,
    config: p.config,
    base: q.base,
    language: q.language,
    env: p.env,
    isolation: q.isolation,
    egress: fromEgress(q.egress),
  });
}

export interface CreateTemplateParams extends IdempotentCallOptions {
  name: string;
  base?: string;
  code?: string;
  limits?: Limits;
  /** "ns" or "gvisor": what the version's runs and sandboxes default to. */
  isolation?: string;
  /** The route out the version's runs and sandboxes get unless a call names one. */
  egress?: Egress;
  /** The command timeout of the template's runs, in ms (the wire's timeout_ms). */
  commandTimeoutMs?: number;
  /** The same as commandTimeoutMs. */
  timeoutMs?: number;
  config?: Record<string, Json>;
  files?: TemplateFile[];
  description?: string;
  /** What the version installs over its base ({ apt, pip, npm, run, files }): the answer comes at once, building; templates.build follows it. */
  image?: WireImageRecipe;
}

/** Saved versions of code, limits and default config (/v1/sandboxes/templates). */
export class Templates {
  constructor(private readonly t: Transport) {}

  /** Saves a new version of the template; answers the version saved. */
  async create(p: CreateTemplateParams): Promise<Template> {
    const body = compact<WireTemplateRequest>({
      name: p.name,
      base: p.base,
      code: p.code,
      limits: fromLimits(p.limits),
      isolation: p.isolation,
      egress: fromEgress(p.egress),
      timeout_ms: p.commandTimeoutMs ?? p.timeoutMs,
      config: p.config,
      files: p.files?.map((f) => ({ file: f.file, path: f.path })),
      description: p.description,
      image: p.image,
    });
    return toTemplate(await this.t.json<WireTemplate>("POST", "/v1/sandboxes/templates", { json: body, idempotencyKey: p.idempotencyKey, signal: p.signal }));
  }

  /** The newest version of each template of the graph; raw.bases lists the base templates. */
  async list(p: { limit?: number; cursor?: string } & CallOptions = {}): Promise<Page<Template>> {
    const body = await this.t.json<unknown>("GET", "/v1/sandboxes/templates", { query: { limit: p.limit, cursor: p.cursor }, signal: p.signal });
    return toPage(body, toTemplate);
  }

  /** The build of a version with an image recipe ("name" or "name@3"): status, failed step, resolved packages, log. */
  async build(name: string, o: CallOptions = {}): Promise<WireTemplateBuildView> {
    return this.t.json<WireTemplateBuildView>("GET", `/v1/sandboxes/templates/${encodeURIComponent(name)}/build`, o);
  }

  /** A template's newest version ("name@3" pins one), with its versions; or a base ("lbb/python"). */
  async get(name: string, o: CallOptions = {}): Promise<Template> {
    return toTemplate(await this.t.json<WireTemplate>("GET", `/v1/sandboxes/templates/${name.split("/").map(encodeURIComponent).join("/")}`, o));
  }
}

/** The files of one sandbox's workspace (/workspace). */
export class SandboxFiles {
  constructor(
    private readonly t: Transport,
    readonly sandboxId: string,
  ) {}

  private get base(): string {
    return `/v1/sandboxes/${encodeURIComponent(this.sandboxId)}`;
  }

  /** Writes a file (relative to /workspace, or absolute inside it); a string is written as UTF-8. */
  async write(path: string, data: Data, o: IdempotentCallOptions = {}): Promise<Record<string, unknown>> {
    return this.t.json("PUT", `${this.base}/files/content`, {
      query: { path },
      body: data,
      headers: { "Content-Type": "application/octet-stream" },
      idempotencyKey: o.idempotencyKey,
      signal: o.signal,
    });
  }

  /** The bytes of a file. */
  async read(path: string, o: CallOptions = {}): Promise<Uint8Array> {
    const resp = await this.t.request("GET", `${this.base}/files/content`, { query: { path }, signal: o.signal });
    return new Uint8Array(await resp.arrayBuffer());
  }

  /** The text of a file (UTF-8). */
  async readText(path: string, o: CallOptions = {}): Promise<string> {
    return new TextDecoder().decode(await this.read(path, o));
  }

  /** The entries of a directory, with type, size, mode and mtime. */
  async list(path = ".", o: { recursive?: boolean } & CallOptions = {}): Promise<Page<FileInfo>> {
    const body = await this.t.json<unknown>("GET", `${this.base}/files`, {
      query: { path, recursive: o.recursive ? "true" : undefined },
      signal: o.signal,
    });
    return toPage(body, toFileInfo);
  }

  /** Removes a file, symlink or directory; a directory that is not empty needs recursive: true. */
  async delete(path: string, o: { recursive?: boolean } & CallOptions = {}): Promise<void> {
    await this.t.request("DELETE", `${this.base}/files`, { query: { path, recursive: o.recursive ? "true" : undefined }, signal: o.signal });
  }

  /** Makes a directory and its parents; answers its entry. */
  async mkdir(path: string, o: CallOptions = {}): Promise<FileInfo> {
    return toFileInfo(await this.t.json("POST", `${this.base}/files/mkdir`, { query: { path }, signal: o.signal }));
  }

  /** Keeps a workspace file as a File of the graph, which outlives the sandbox. */
  async keep(path: string, o: IdempotentCallOptions = {}): Promise<GraphFile> {
    return toGraphFile(
      await this.t.json("POST", "/v1/files", { query: { source_sandbox: this.sandboxId, source_path: path }, idempotencyKey: o.idempotencyKey, signal: o.signal }),
    );
  }

  /** Copies a File of the graph (by its sha256) into the workspace at path. */
  async importFile(sha256: string, path: string, o: IdempotentCallOptions = {}): Promise<Record<string, unknown>> {
    return this.t.json("PUT", "/v1/sandboxes/files/content", {
      query: { sandbox: this.sandboxId, path, source_sha256: sha256 },
      idempotencyKey: o.idempotencyKey,
      signal: o.signal,
    });
  }
}

export interface StreamOptions extends CallOptions {
  /** "stdout" (default), "stderr" or "both". */
  stream?: "stdout" | "stderr" | "both";
  /** Keep reading until the command ends (default true). */
  follow?: boolean;
}

/** Command records, by id (/v1/commands). */
export class Commands {
  constructor(private readonly t: Transport) {}

  /** A command record; with waitMs the server waits up to that long for it to end. */
  async get(id: string, o: { waitMs?: number } & CallOptions = {}): Promise<Command> {
    return toCommand(
      await this.t.json<WireCommand>("GET", `/v1/commands/${encodeURIComponent(id)}`, { query: { wait_ms: o.waitMs }, waitMs: o.waitMs, signal: o.signal }),
    );
  }

  /** Waits until the command ends (or timeoutMs passes) and answers its record. */
  async wait(id: string, o: { timeoutMs?: number } & CallOptions = {}): Promise<Command> {
    return toCommand(await waitCommand(this.t, id, o.timeoutMs, o.signal));
  }

  async list(p: { sandbox?: string; status?: string; limit?: number; cursor?: string } & CallOptions = {}): Promise<Page<Command>> {
    const body = await this.t.json<unknown>("GET", "/v1/commands", {
      query: { sandbox: p.sandbox, status: p.status, limit: p.limit, cursor: p.cursor },
      signal: p.signal,
    });
    return toPage(body, toCommand);
  }

  /** The command's output as server-sent events: what is kept, then live chunks, then its exit. */
  stream(id: string, o: StreamOptions = {}): AsyncIterable<ServerSentEvent> {
    return this.t.events(
      `/v1/commands/${encodeURIComponent(id)}/output`,
      { stream: o.stream ?? "stdout", follow: o.follow === false ? "false" : "true" },
      o.signal,
    );
  }

  async kill(id: string, o: { signal?: AbortSignal; killSignal?: string } = {}): Promise<Command> {
    return toCommand(
      await this.t.json<WireCommand>("POST", `/v1/commands/${encodeURIComponent(id)}/kill`, { json: compact({ signal: o.killSignal }), signal: o.signal }),
    );
  }

  /**
   * Writes to the stdin of a running command started with stdinOpen (a string as UTF-8);
   * close: true closes it after, so the process reads end of file. Never retried: bytes are
   * not sent twice.
   */
  async writeStdin(id: string, data: Data = new Uint8Array(), o: { close?: boolean } & CallOptions = {}): Promise<StdinResult> {
    return this.t.json<StdinResult>("POST", `/v1/commands/${encodeURIComponent(id)}/stdin`, {
      query: { close: o.close ? "true" : "false" },
      body: data,
      headers: { "Content-Type": "application/octet-stream" },
      retry: false,
      signal: o.signal,
    });
  }
}

/** The answer of a stdin write. */
export interface StdinResult {
  command: string;
  /** Written by this call. */
  bytes: number;
  /** Written to the command's stdin in all. */
  total: number;
  closed: boolean;
}

export interface CreateCommandParams extends IdempotentCallOptions {
  /** argv (the program and its arguments), or a shell line ("ls -l | wc -l"), run as bash -lc. */
  argv: string | string[];
  env?: Record<string, string>;
  cwd?: string;
  stdin?: string | Uint8Array;
  /** Keep stdin open for commands.writeStdin (after stdin, if given). */
  stdinOpen?: boolean;
  /** How long the answer waits for the process to end; it says status "running" if it has not. */
  waitMs?: number;
  timeoutMs?: number;
}

/** A command as argv: an array as it is, a shell line as bash -lc running it. */
function toArgv(cmd: string | string[]): string[] {
  if (typeof cmd === "string") return ["bash", "-lc", cmd];
  if (!Array.isArray(cmd)) throw new TypeError('a command is a shell line or argv, e.g. "ls -l | wc -l" or ["python", "upper.py"]');
  return cmd;
}

function commandBody(p: CreateCommandParams): Record<string, unknown> {
  const body: Record<string, unknown> = compact({
    argv: toArgv(p.argv),
    env: p.env,
    cwd: p.cwd,
    stdin_open: p.stdinOpen || undefined,
    wait_ms: p.waitMs,
    timeout_ms: p.timeoutMs,
  });
  if (typeof p.stdin === "string") body.stdin = p.stdin;
  else if (p.stdin !== undefined) {
    try {
      body.stdin = new TextDecoder("utf-8", { fatal: true }).decode(p.stdin);
    } catch {
      body.stdin_base64 = base64(p.stdin);
    }
  }
  return body;
}

function base64(b: Uint8Array): string {
  let s = "";
  for (let i = 0; i < b.length; i += 0x8000) s += String.fromCharCode(...b.subarray(i, i + 0x8000));
  return btoa(s);
}

/** How commands.run hands over a command's output. */
export interface RunCommandOptions extends IdempotentCallOptions {
  env?: Record<string, string>;
  cwd?: string;
  stdin?: string | Uint8Array;
  timeoutMs?: number;
  /** Gets every chunk of stdout as it comes. */
  onStdout?: (text: string) => unknown;
  /** Gets every chunk of stderr as it comes. */
  onStderr?: (text: string) => unknown;
  /** Keep up to this many bytes of each stream in the answer's output.stdout and output.stderr. */
  outputLimit?: number;
}

/** A command for commands.run: argv or a shell line, and how to hand over its output. */
export interface RunCommandParams extends RunCommandOptions {
  argv: string | string[];
}

const STREAMS = ["stdout", "stderr"] as const;

/**
 * Takes the events of one streamed command (POST …/commands with stream): its record, its
 * chunks of stdout and stderr in the order the process wrote them, its end. It counts the
 * bytes that did not come (a gap in the offsets, or fewer bytes than the record says) and
 * keeps up to outputLimit bytes of each stream.
 */
class CommandStream {
  private exit: WireCommand | undefined;
  private lost = 0;
  private readonly next = { stdout: 0, stderr: 0 };
  private readonly kept = { stdout: [] as Uint8Array[], stderr: [] as Uint8Array[] };
  private readonly keptBytes = { stdout: 0, stderr: 0 };
  private readonly cut = { stdout: false, stderr: false };

  constructor(private readonly limit: number | undefined) {}

  feed(ev: ServerSentEvent): { stream: "stdout" | "stderr"; text: string } | undefined {
    if (ev.event === "stdout" || ev.event === "stderr") {
      const c = ev.json() as { stream?: string; offset?: number; data?: string; base64?: string };
      const stream = c.stream === "stderr" ? "stderr" : c.stream === "stdout" ? "stdout" : ev.event;
      const text = c.data ?? "";
      const raw = c.base64 ? Uint8Array.from(atob(c.base64), (ch) => ch.charCodeAt(0)) : new TextEncoder().encode(text);
      this.advance(stream, c.offset ?? 0);
      this.next[stream] += raw.length;
      if (this.limit !== undefined) {
        const room = Math.max(0, this.limit - this.keptBytes[stream]);
        this.kept[stream].push(raw.subarray(0, room));
        this.keptBytes[stream] += Math.min(room, raw.length);
        if (raw.length > room) this.cut[stream] = true;
      }
      return { stream, text };
    }
    if (ev.event === "exit") {
      this.exit = ev.json() as WireCommand;
      for (const st of STREAMS) {
        const o = this.exit[st];
        if (o && !o.expired) this.advance(st, o.bytes ?? 0);
      }
    } else if (ev.event === "error") {
      const e = ((ev.json() as { error?: { code?: string; message?: string; request_id?: string } }).error ?? {});
      throw new LbbError(e.message ?? ev.data, { code: e.code ?? "error", ...(e.request_id ? { requestId: e.request_id } : {}) });
    }
    return undefined;
  }

  private advance(stream: "stdout" | "stderr", offset: number): void {
    if (offset > this.next[stream]) {
      this.lost += offset - this.next[stream];
      this.next[stream] = offset;
    }
  }

  result(): CommandResult {
    if (!this.exit) throw new APIConnectionError("the output stream ended before the command did", { code: "connection_error" });
    const cmd: CommandResult = toCommand(this.exit);
    if (this.limit !== undefined) {
      const text = (st: "stdout" | "stderr") => new TextDecoder().decode(concat(this.kept[st], this.keptBytes[st]));
      cmd.output = { stdout: text("stdout"), stderr: text("stderr"), truncated: this.cut.stdout || this.cut.stderr };
    }
    if (this.lost > 0) {
      throw new OutputLostError(`${this.lost} bytes of the output of ${cmd.id} did not come: what came is incomplete`, cmd, this.lost);
    }
    return cmd;
  }
}

function concat(parts: Uint8Array[], n: number): Uint8Array {
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** The commands of one sandbox. */
export class SandboxCommands {
  private readonly commands: Commands;

  constructor(
    private readonly t: Transport,
    readonly sandboxId: string,
  ) {
    this.commands = new Commands(t);
  }

  /** Starts a process; see CreateCommandParams.waitMs. */
  async create(p: CreateCommandParams): Promise<Command> {
    const w = await this.t.json<WireCommand>("POST", `/v1/sandboxes/${encodeURIComponent(this.sandboxId)}/commands`, {
      json: commandBody(p),
      idempotencyKey: p.idempotencyKey,
      waitMs: p.waitMs,
      signal: p.signal,
    });
    return toCommand(w);
  }

  /**
   * Runs a command to its end, like E2B's and Daytona's commands.run: a shell line
   * ("ls -l | wc -l", run as bash -lc), argv, or params with argv. Its output streams from its
   * first byte: onStdout and onStderr get every chunk as it comes (text; a chunk never ends
   * inside a character; a promise they answer is awaited), and none of it is lost, the server
   * making the process wait while this client is behind. With outputLimit the answer's
   * output.stdout and output.stderr are the streams as they came, up to that many bytes each
   * (output.truncated says the limit cut one); the record's stdout and stderr keep head and tail.
   *
   * A command that fails is an answer (status, exitCode), not an error. Throws
   * OutputLostError if output did not come (the client read nothing for minutes).
   */
  async run(cmd: string | string[] | RunCommandParams, opts: RunCommandOptions = {}): Promise<CommandResult> {
    const p: RunCommandParams = typeof cmd === "string" || Array.isArray(cmd) ? { ...opts, argv: cmd } : { ...cmd, ...opts };
    const body = { ...commandBody(p), stream: true };
    const reader = new CommandStream(p.outputLimit);
    const events = this.t.events(`/v1/sandboxes/${encodeURIComponent(this.sandboxId)}/commands`, {}, p.signal, {
      json: body,
      idempotencyKey: p.idempotencyKey,
    });
    for await (const ev of events) {
      const chunk = reader.feed(ev);
      const cb = chunk && (chunk.stream === "stderr" ? p.onStderr : p.onStdout);
      if (chunk && cb) await cb(chunk.text);
    }
    return reader.result();
  }

  async list(p: { status?: string; limit?: number; cursor?: string } & CallOptions = {}): Promise<Page<Command>> {
    const body = await this.t.json<unknown>("GET", `/v1/sandboxes/${encodeURIComponent(this.sandboxId)}/commands`, {
      query: { status: p.status, limit: p.limit, cursor: p.cursor },
      signal: p.signal,
    });
    return toPage(body, toCommand);
  }

  get(id: string, o: { waitMs?: number } & CallOptions = {}): Promise<Command> {
    return this.commands.get(id, o);
  }

  wait(id: string, o: { timeoutMs?: number } & CallOptions = {}): Promise<Command> {
    return this.commands.wait(id, o);
  }

  stream(id: string, o: StreamOptions = {}): AsyncIterable<ServerSentEvent> {
    return this.commands.stream(id, o);
  }

  kill(id: string, o: { signal?: AbortSignal; killSignal?: string } = {}): Promise<Command> {
    return this.commands.kill(id, o);
  }

  writeStdin(id: string, data?: Data, o: { close?: boolean } & CallOptions = {}): Promise<StdinResult> {
    return this.commands.writeStdin(id, data, o);
  }
}

/** A handle on a long-lived sandbox: its files, its commands, run(), stop, pause, resume, snapshot, fork, delete. */
export class Sandbox {
  readonly id: string;
  info: SandboxInfo;
  readonly files: SandboxFiles;
  readonly commands: SandboxCommands;
  /** The code interpreter: stateful contexts and their cells. */
  readonly code: SandboxCode;
  /** Terminals over a WebSocket: `pty.create()`, `pty.attach(id)`. */
  readonly pty: SandboxPty;
  /** Ports, private unless shared: `ports.url(port, { expiresInSeconds })` is `previewUrl`. */
  readonly ports: { url(port: number, p?: PreviewParams): Promise<Preview> };

  constructor(
    private readonly t: Transport,
    w: WireSandbox,
  ) {
    const id = w.id ?? (w as unknown as { sandbox?: string }).sandbox;
    if (!id) throw new LbbError(`the server's answer names no sandbox id: ${JSON.stringify(w)}`);
    this.id = id;
    this.info = toSandboxInfo({ ...w, id });
    this.files = new SandboxFiles(t, id);
    this.commands = new SandboxCommands(t, id);
    this.code = new SandboxCode(t, id);
    this.pty = new SandboxPty(t, id);
    this.ports = { url: (port, p) => this.previewUrl(port, p) };
  }

  get status(): string {
    return this.info.status;
  }

  private get path(): string {
    return `/v1/sandboxes/${encodeURIComponent(this.id)}`;
  }

  private update(w: Partial<WireSandbox>): SandboxInfo {
    if (w && w.id) this.info = toSandboxInfo(w as WireSandbox);
    return this.info;
  }

  /** Reads the sandbox's record again. */
  async refresh(o: CallOptions = {}): Promise<SandboxInfo> {
    return this.update(await this.t.json<WireSandbox>("GET", this.path, o));
  }

  /** Calls run(input, config) of code (or a template's code) in this sandbox, next to its files. */
  async run<R = unknown>(p: SandboxRunParams): Promise<RunResult<R>> {
    const body = { ...runBody(p), ...compact({ timeout_ms: p.timeoutMs, wait_ms: p.waitMs }) };
    const resp = await this.t.request("POST", `${this.path}/run`, { json: body, idempotencyKey: p.idempotencyKey, waitMs: p.waitMs, signal: p.signal });
    return finishRun<R>(this.t, resp, p.wait ?? true, p.signal);
  }

  /** Ends the sandbox's processes; its disk stays. */
  async stop(o: CallOptions = {}): Promise<SandboxInfo> {
    return this.update(await this.t.json<WireSandbox>("POST", `${this.path}/stop`, o));
  }

  /**
   * Pauses the running sandbox (status "paused"). On gvisor its processes and memory go to
   * disk and its RAM is freed; on ns they are frozen in RAM. A command still running in it
   * throws CommandsRunningError; pausing a paused sandbox is no error.
   */
  async pause(o: CallOptions = {}): Promise<SandboxInfo> {
    return this.update(await this.t.json<WireSandbox>("POST", `${this.path}/pause`, o));
  }

  /** Wakes a paused sandbox, its processes alive again where they were; or starts a stopped one again on the same workspace. */
  async resume(o: CallOptions = {}): Promise<SandboxInfo> {
    return this.update(await this.t.json<WireSandbox>("POST", `${this.path}/resume`, o));
  }

  /**
   * Takes a memory snapshot (processes, memory and disk) of the running sandbox, which then
   * runs on. Needs isolation "gvisor": on ns it throws NotSupportedError (409 not_supported).
   */
  /**
   * A signed URL of `port` in the sandbox (a preview), valid `expiresInSeconds` (default 3600,
   * at most 7 days): a server listening there (127.0.0.1 or 0.0.0.0) answers it, HTTP and
   * WebSocket alike. Ports are private otherwise; anyone with the URL reaches the port until
   * it expires.
   */
  async previewUrl(port: number, p: PreviewParams = {}): Promise<Preview> {
    const body = compact<WirePreviewRequest>({ expires_in_seconds: p.expiresInSeconds });
    const w = await this.t.json<WirePreview>("POST", `${this.path}/ports/${Math.trunc(port)}/url`, { json: body, signal: p.signal });
    return { id: w.id, url: w.url ?? "", sandbox: w.sandbox, port: w.port, expiresAt: w.expires_at, createdAt: w.created_at };
  }

  async snapshot(p: SnapshotParams = {}): Promise<Snapshot> {
    const body = compact<WireSnapshotRequest>({ metadata: p.metadata });
    // Retried under one key: a retry answers the snapshot the first attempt took.
    return toSnapshot(await this.t.json<WireSnapshot>("POST", `${this.path}/snapshot`, { json: body, idempotencyKey: p.idempotencyKey, signal: p.signal }));
  }

  /**
   * Starts a new sandbox from a snapshot of this one (without p.snapshot, a fresh snapshot of
   * the running sandbox is taken first, and kept) and answers its handle. The fork runs with
   * this one's memory, processes and files as they were, and its isolation, limits and
   * template; p.env is laid over this sandbox's, p.metadata replaces its.
   */
  async fork(p: ForkParams = {}): Promise<Sandbox> {
    const body = compact<WireForkRequest>({
      snapshot: p.snapshot,
      metadata: p.metadata,
      expires_in_seconds: p.expiresInSeconds,
      env: p.env,
    });
    const w = await this.t.json<WireSandbox>("POST", `${this.path}/fork`, { json: body, idempotencyKey: p.idempotencyKey, signal: p.signal });
    return new Sandbox(this.t, w);
  }

  /** This sandbox's snapshots, newest first. */
  async snapshots(p: { limit?: number; cursor?: string } & CallOptions = {}): Promise<Page<Snapshot>> {
    return new Snapshots(this.t).list(this.id, p);
  }

  /** Destroys the sandbox; its record is kept. */
  async delete(o: CallOptions = {}): Promise<void> {
    await this.t.request("DELETE", this.path, o);
  }
}

export interface PreviewParams extends CallOptions {
  /** How long the URL is valid (default 3600 s, at most 7 days). */
  expiresInSeconds?: number;
}

/** A signed, expiring URL of a port of a sandbox. */
export interface Preview {
  /** prv_…: DELETE /v1/sandboxes/{id}/previews/{preview} revokes it. */
  id: string;
  url: string;
  sandbox: string;
  port: number;
  expiresAt: string;
  createdAt: string;
}

export interface SnapshotParams extends IdempotentCallOptions {
  /** Labels of the snapshot. */
  metadata?: Record<string, string>;
}

export interface ForkParams extends IdempotentCallOptions {
  /** The snapshot (`snp_…`, of this sandbox) to start from; without it a fresh one is taken. */
  snapshot?: string;
  /** Labels of the fork; without them the source's. */
  metadata?: Record<string, string>;
  /** The fork's lifetime (default the server's, capped). */
  expiresInSeconds?: number;
  /** Variables of the fork's commands, over the source's; never stored. */
  env?: Record<string, string>;
}

export interface CreateSandboxParams extends SandboxSpec {
  expiresInSeconds?: number;
  /** Lets code inside call the API at $LBB_URL with these scopes (within this key's); no key enters the sandbox. */
  api?: APIGrant;
  /** A public repository cloned into /workspace before create answers. */
  git?: GitClone;
  /**
   * A name for the sandbox: the first create with it makes the sandbox; later ones answer it
   * running, or resume it when stopped or paused (its workspace restored, also where its host's
   * copy is gone). A deleted sandbox frees the name.
   */
  session?: string;
  /** A named size: "standard-1" … "standard-5" (or "small", "standard", "large"); limits override it field by field. */
  size?: "standard-1" | "standard-2" | "standard-3" | "standard-4" | "standard-5" | "small" | "standard" | "large";
}

/** Runs and sandboxes (/v1/sandboxes). */
export class Sandboxes {
  readonly templates: Templates;

  constructor(private readonly t: Transport) {
    this.templates = new Templates(t);
  }

  /**
   * Runs code (or a template) once in a new sandbox, destroyed when the run ends.
   *
   * A run that raises answers ok: false with the traceback in stderr; a failed call throws an
   * LbbError. The SDK sends a fresh Idempotency-Key (or p.idempotencyKey) and reuses it on its
   * retries, so the code runs at most once; past waitMs it waits on the command.
   */
  async run<R = unknown>(p: RunParams): Promise<RunResult<R>> {
    const body = compact<WireCreateSandboxRequest>({
      run: runBody(p),
      limits: fromLimits(p.limits),
      timeout_ms: p.timeoutMs,
      wait_ms: p.waitMs,
      metadata: p.metadata,
      origin: p.origin,
    });
    const resp = await this.t.request("POST", "/v1/sandboxes", { json: body, idempotencyKey: p.idempotencyKey, waitMs: p.waitMs, signal: p.signal });
    return finishRun<R>(this.t, resp, p.wait ?? true, p.signal);
  }

  /**
   * Runs code as a plain program once (python3 -c, node -e, bash -c) in a new sandbox that
   * ends with it, like seed 003's runCode: `{ exitCode, stdout, stderr, durationMs }` say how
   * it went. A non-zero exit is an answer, not a thrown error.
   */
  async runCode(p: RunCodeParams): Promise<RunResult<null>> {
    const { code, language, ...rest } = p;
    return this.run<null>({ ...rest, script: code, language: language ?? "python" });
  }

  /** Creates a long-lived sandbox. */
  async create(p: CreateSandboxParams = {}): Promise<Sandbox> {
    const body = compact<WireCreateSandboxRequest>({
      template: p.template,
      base: p.base,
      limits: fromLimits(p.limits),
      isolation: p.isolation,
      egress: fromEgress(p.egress),
      api: p.api ? { scopes: p.api.scopes, ...(p.api.maxRuns !== undefined ? { max_runs: p.api.maxRuns } : {}) } : undefined,
      git: p.git,
      expires_in_seconds: p.expiresInSeconds,
      env: p.env,
      metadata: p.metadata,
      origin: p.origin,
      session: p.session,
      size: p.size,
    });
    return new Sandbox(this.t, await this.t.json<WireSandbox>("POST", "/v1/sandboxes", { json: body, idempotencyKey: p.idempotencyKey, signal: p.signal }));
  }

  /** A handle on an existing sandbox, with its record. */
  async get(id: string, o: CallOptions = {}): Promise<Sandbox> {
    return new Sandbox(this.t, await this.t.json<WireSandbox>("GET", `/v1/sandboxes/${encodeURIComponent(id)}`, o));
  }

  /**
   * The sandboxes of the graph; label ({ team: "a" }, "team=a" or a list of those strings)
   * keeps those whose metadata has every key=value given.
   */
  async list(
    p: { status?: string; label?: Record<string, string> | string | string[]; session?: string; limit?: number; cursor?: string } & CallOptions = {},
  ): Promise<Page<SandboxInfo>> {
    const label =
      p.label === undefined ? undefined : typeof p.label === "string" ? [p.label] : Array.isArray(p.label) ? p.label : Object.entries(p.label).map(([k, v]) => `${k}=${v}`);
    const body = await this.t.json<unknown>("GET", "/v1/sandboxes", {
      query: { status: p.status, label, session: p.session, limit: p.limit, cursor: p.cursor },
      signal: p.signal,
    });
    return toPage(body, toSandboxInfo);
  }

  async delete(id: string, o: CallOptions = {}): Promise<void> {
    await this.t.request("DELETE", `/v1/sandboxes/${encodeURIComponent(id)}`, o);
  }

  /**
   * Creates a sandbox, hands it to fn and deletes it when fn ends, also after an error;
   * answers what fn returns.
   */
  async scoped<T>(spec: CreateSandboxParams, fn: (sb: Sandbox) => Promise<T> | T): Promise<T> {
    const sb = await this.create(spec);
    let result: T;
    try {
      result = await fn(sb);
    } catch (e) {
      await sb.delete().catch((de: unknown) => {
        if (!(de instanceof NotFoundError) && e instanceof Error) {
          (e as { deleteError?: unknown }).deleteError = de;
        }
      });
      throw e;
    }
    try {
      await sb.delete();
    } catch (de) {
      if (!(de instanceof NotFoundError)) throw de;
    }
    return result;
  }
}

/** Memory snapshots of sandboxes, by id (/v1/snapshots); a sandbox lists its own with sandbox.snapshots(). */
export class Snapshots {
  constructor(private readonly t: Transport) {}

  /** The snapshots of a sandbox, newest first. */
  async list(sandboxId: string, p: { limit?: number; cursor?: string } & CallOptions = {}): Promise<Page<Snapshot>> {
    const body = await this.t.json<unknown>("GET", `/v1/sandboxes/${encodeURIComponent(sandboxId)}/snapshots`, {
      query: { limit: p.limit, cursor: p.cursor },
      signal: p.signal,
    });
    return toPage(body, toSnapshot);
  }

  async get(id: string, o: CallOptions = {}): Promise<Snapshot> {
    return toSnapshot(await this.t.json<WireSnapshot>("GET", `/v1/snapshots/${encodeURIComponent(id)}`, o));
  }

  /** Deletes a snapshot and its bytes (forks made from it run on); answers the deleted snapshot. */
  async delete(id: string, o: CallOptions = {}): Promise<Snapshot> {
    return toSnapshot(await this.t.json<WireSnapshot>("DELETE", `/v1/snapshots/${encodeURIComponent(id)}`, o));
  }
}

/** A 429 quota_exceeded: a quota stays full until something is deleted, so no retry helps. */
function fullQuota(status: number, answer: Uint8Array): boolean {
  if (status !== 429) return false;
  try {
    return (JSON.parse(new TextDecoder().decode(answer)) as { error?: { code?: string } }).error?.code === "quota_exceeded";
  } catch {
    return false;
  }
}

/** Files of the graph (/v1/files): content-addressed, outliving sandboxes. */
export class Files {
  constructor(private readonly t: Transport) {}

  async upload(data: Data, o: { name?: string } & IdempotentCallOptions = {}): Promise<GraphFile> {
    return toGraphFile(
      await this.t.json("POST", "/v1/files", {
        query: { name: o.name },
        body: data,
        headers: { "Content-Type": "application/octet-stream" },
        idempotencyKey: o.idempotencyKey,
        signal: o.signal,
      }),
    );
  }

  /** Keeps a workspace file as a File; it names the sandbox and path as its origin. */
  keep(sandboxId: string, path: string, o: IdempotentCallOptions = {}): Promise<GraphFile> {
    return new SandboxFiles(this.t, sandboxId).keep(path, o);
  }

  async list(p: { limit?: number; cursor?: string } & CallOptions = {}): Promise<Page<GraphFile>> {
    const body = await this.t.json<unknown>("GET", "/v1/files", { query: { limit: p.limit, cursor: p.cursor }, signal: p.signal });
    return toPage(body, toGraphFile);
  }

  async get(id: string, o: CallOptions = {}): Promise<GraphFile> {
    return toGraphFile(await this.t.json("GET", `/v1/files/${encodeURIComponent(id)}`, o));
  }

  async content(id: string, o: CallOptions = {}): Promise<Uint8Array> {
    const resp = await this.t.request("GET", `/v1/files/${encodeURIComponent(id)}/content`, o);
    return new Uint8Array(await resp.arrayBuffer());
  }

  /**
   * Deletes a File; its bytes go with the last File, of any graph, that names them. Workspaces
   * that imported it keep their copies. Throws FileInUseError while a template version names it.
   */
  async delete(id: string, o: CallOptions = {}): Promise<GraphFile> {
    return toGraphFile(await this.t.json("DELETE", `/v1/files/${encodeURIComponent(id)}`, o));
  }
}

/**
 * The client. Every call goes to one graph (options.graph, default "main").
 *
 * ```ts
 * const lbb = new LbbClient({ baseUrl: "http://127.0.0.1:7700", apiKey, graph: "main" });
 * const { result } = await lbb.sandboxes.run({ code, input: [1, 2, 3] });
 * ```
 */
export class LbbClient {
  readonly sandboxes: Sandboxes;
  readonly commands: Commands;
  readonly files: Files;
  readonly snapshots: Snapshots;
  private readonly t: Transport;
  private readonly options: ClientOptions;

  constructor(options: ClientOptions = {}) {
    this.options = options;
    this.t = new Transport(options);
    this.sandboxes = new Sandboxes(this.t);
    this.commands = new Commands(this.t);
    this.files = new Files(this.t);
    this.snapshots = new Snapshots(this.t);
  }

  /** A client like this one that calls with another key, or a grant's token. */
  withApiKey(apiKey: string): LbbClient {
    return new LbbClient({ ...this.options, baseUrl: this.t.baseUrl, graph: this.t.graph, apiKey });
  }

  /** Mints a short-lived grant for one attempt of a workflow step (POST /v1/grants); its token is answered once. */
  mintGrant(req: WireGrantRequest = {}, o: CallOptions = {}): Promise<WireGrant> {
    return this.t.json<WireGrant>("POST", "/v1/grants", { json: req, signal: o.signal });
  }

  /** A grant's record: origin, budget, usage so far (GET /v1/grants/{id}). */
  getGrant(id: string, o: CallOptions = {}): Promise<WireGrant> {
    return this.t.json<WireGrant>("GET", `/v1/grants/${encodeURIComponent(id)}`, o);
  }

  /** Revokes a grant: its calls answer 401 grant_revoked from then on. */
  revokeGrant(id: string, o: CallOptions = {}): Promise<WireGrant> {
    return this.t.json<WireGrant>("DELETE", `/v1/grants/${encodeURIComponent(id)}`, o);
  }

  /** Sets the budget of one run of a workflow (PUT /v1/budgets/{workflow}/{run}). */
  putBudget(workflow: string, run: string, budget: WireBudget, o: CallOptions = {}): Promise<WireWorkflowBudget> {
    return this.t.json<WireWorkflowBudget>("PUT", `/v1/budgets/${encodeURIComponent(workflow)}/${encodeURIComponent(run)}`, { json: budget, signal: o.signal });
  }

  /** A workflow run's budget, what its runs used and what is left. */
  getBudget(workflow: string, run: string, o: CallOptions = {}): Promise<WireWorkflowBudget> {
    return this.t.json<WireWorkflowBudget>("GET", `/v1/budgets/${encodeURIComponent(workflow)}/${encodeURIComponent(run)}`, o);
  }

  /** What the graph's ended runs and commands used (GET /v1/usage), over [from, to), grouped. */
  usage(p: { from?: string; to?: string; groupBy?: "key" | "template" | "workflow" | "day" } & CallOptions = {}): Promise<WireUsageReport> {
    return this.t.json<WireUsageReport>("GET", "/v1/usage", { query: { from: p.from, to: p.to, group_by: p.groupBy }, signal: p.signal });
  }

  get baseUrl(): string {
    return this.t.baseUrl;
  }

  get graph(): string {
    return this.t.graph;
  }

  /** GET /healthz. */
  health(o: CallOptions = {}): Promise<Record<string, unknown>> {
    return this.t.json("GET", "/healthz", { graph: false, signal: o.signal });
  }

  /** The graph's quotas: usage and limits (GET /v1/quotas). */
  async quotas(o: CallOptions = {}): Promise<Quotas> {
    return toQuotas(await this.t.json<WireQuotas>("GET", "/v1/quotas", o));
  }

  /** The server's OpenAPI document. */
  openapi(o: CallOptions = {}): Promise<Record<string, unknown>> {
    return this.t.json("GET", "/v1/openapi.json", { graph: false, signal: o.signal });
  }
}
