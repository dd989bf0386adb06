/**
 * The SDK's values, in camelCase, and their mapping from and to the wire (src/wire.ts).
 * User data (input, config, result, metadata, env) passes through untouched; each value keeps
 * the JSON it came from in `raw`, with any field this SDK does not know yet.
 */

import type {
  CommandStatus,
  SandboxStatus,
  WireCommand,
  WireFile,
  WireFileInfo,
  WireLimits,
  WireOutput,
  WireQuota,
  WireQuotas,
  WireRunResult,
  WireSandbox,
  WireSnapshot,
  WireTemplate,
  WireTemplateRef,
  WireUsage,
  WireEgress,
  WireEgressUsage,
} from "./wire.js";

export type { CommandStatus, SandboxStatus };

/**
 * What a record keeps of one output stream: its head and tail, which never repeat a byte (a
 * stream that fits the tail is all in the tail), and its size. `truncated` and `droppedBytes`
 * say how much head and tail do not hold.
 */
export interface Output {
  head: string;
  tail: string;
  bytes: number;
  expired?: boolean;
  truncated?: boolean;
  droppedBytes?: number;
}

/** Resources of a sandbox. */
export interface Limits {
  memoryMib?: number;
  cpus?: number;
  pids?: number;
  diskMib?: number;
}

export interface Usage {
  vcpuMs: number;
  gibMs: number;
  /** What the sandbox's egress carried. */
  egress?: EgressUsage;
}

/**
 * A sandbox's route out: "none" (the default), "allowlist" (the host names of allow:
 * "example.org", "*.example.org", with ":port" or ":*"; no port is 80 and 443) or "public".
 * Non-public addresses are refused in every mode. quotaBytes: both ways, cut at the quota.
 */
export interface Egress {
  mode: "none" | "allowlist" | "public";
  allow?: string[];
  quotaBytes?: number;
}

/** What an egress carried: bytes each way, connections made and refused, per destination. */
export interface EgressUsage {
  bytesOut: number;
  bytesIn: number;
  connections: number;
  refused: number;
  quotaExceeded?: boolean;
  destinations?: { host: string; port: number; connections: number; refused: number }[];
}

/** What code inside a sandbox may call of the API (at $LBB_URL inside), with a key the host attaches. */
export interface APIGrant {
  scopes: string[];
  /** The most runs it may start; 0 or absent: no cap. */
  maxRuns?: number;
  /** The derived key's id (records only). */
  key?: string;
}

/** A public repository cloned into /workspace when the sandbox is created. */
export interface GitClone {
  url: string;
  branch?: string;
  depth?: number;
}

export interface TemplateRef {
  id: string;
  name: string;
  version: number;
}

/** The answer of a run. `result` is what run(input, config) returned. */
export interface RunResult<R = unknown> {
  /** True when run() returned and the process exited with code 0. */
  ok: boolean;
  /** null when resultTruncated: the File resultFile holds it. */
  result: R;
  /** The result was larger than the server keeps in a record (its --max-result-bytes). */
  resultTruncated?: boolean;
  /** With resultTruncated: the result's size in bytes. */
  resultBytes?: number;
  /** With resultTruncated: the File of the graph (`fil_…`) that holds the result (files.content); absent when the graph's Files quotas had no room (error says so). */
  resultFile?: string;
  error?: string;
  /** The id (`cmd_…`) of the command record of this run. */
  command: string;
  sandbox: string;
  status: CommandStatus;
  exitCode: number | null;
  signal?: string;
  durationMs: number;
  stdout: Output;
  stderr: Output;
  base?: string;
  template?: TemplateRef;
  limits?: Limits;
  /** The isolation it ran on: "ns" or "gvisor". */
  isolation?: string;
  timeoutMs?: number;
  usage?: Usage;
  createdAt?: string;
  startedAt?: string;
  finishedAt?: string;
  raw: WireRunResult;
}

/** A command that commands.run ran to its end: its record and, with outputLimit, its output as it came. */
export interface CommandResult extends Command {
  /** stdout and stderr as they came, up to outputLimit bytes each; truncated says the limit cut one. */
  output?: { stdout: string; stderr: string; truncated: boolean };
}

/** A command record: a process, or a run() in a sandbox. */
export interface Command {
  id: string;
  sandbox: string;
  /** terminal: a terminal opened over GET /v1/sandboxes/{id}/pty; code: a cell in a code context; script: a plain program run once. */
  kind: "process" | "run" | "terminal" | "code" | "script";
  status: CommandStatus;
  ok: boolean;
  exitCode: number | null;
  signal?: string;
  result?: unknown;
  resultTruncated?: boolean;
  resultBytes?: number;
  resultFile?: string;
  error?: string;
  argv?: string[];
  cwd?: string;
  stdinBytes?: number;
  template?: TemplateRef;
  envNames?: string[];
  timeoutMs?: number;
  stdout: Output;
  stderr: Output;
  createdAt: string;
  startedAt?: string;
  finishedAt?: string;
  durationMs: number;
  raw: WireCommand;
}

/** The sandbox and snapshot a fork started from. */
export interface ForkedFrom {
  sandbox: string;
  snapshot: string;
}

/** A sandbox record. */
export interface SandboxInfo {
  id: string;
  status: SandboxStatus;
  oneCall?: boolean;
  base?: string;
  image?: string;
  template?: TemplateRef;
  limits?: Limits;
  /** The isolation it runs on: "ns" or "gvisor". */
  isolation?: string;
  envNames?: string[];
  metadata?: Record<string, string>;
  createdAt: string;
  startedAt?: string;
  endedAt?: string;
  expiresAt?: string;
  endReason?: string;
  error?: string;
  usage?: Usage;
  /** When it was paused; only while it is. */
  pausedAt?: string;
  /** Set on a fork. */
  forkedFrom?: ForkedFrom;
  /** Its route out; usage.egress says what it carried. */
  egress?: Egress;
  api?: APIGrant;
  git?: GitClone;
  /** The caller's name for it (sandboxes.create's session). */
  session?: string;
  /** The named size its limits came from ("standard-1" … "standard-5"). */
  size?: string;
  /** Its disk archived to the server's blob store at its last stop; only while it is stopped. */
  workspace?: WorkspaceArchive;
  raw: WireSandbox;
}

/** A stopped sandbox's disk in the blob store, restored at resume where its host's copy is gone. */
export interface WorkspaceArchive {
  sha256: string;
  bytes: number;
  diskBytes: number;
  archivedAt: string;
}

/** A memory snapshot of a running sandbox (`snp_…`): its processes and memory with its disk. Forks start from one; it goes with its sandbox. */
export interface Snapshot {
  id: string;
  /** The sandbox it is of. */
  sandbox: string;
  isolation: string;
  /** True when it holds processes and memory, not only the disk. */
  memory: boolean;
  sizeBytes: number;
  createdAt: string;
  /** How long taking it held the sandbox. */
  durationMs: number;
  metadata: Record<string, string>;
  raw: WireSnapshot;
}

export interface TemplateFile {
  file: string;
  path: string;
}

/** One version of a template. */
export interface Template {
  id: string;
  name: string;
  version: number;
  base: string;
  code?: string;
  limits?: Limits;
  /** The isolation its runs and sandboxes default to; absent: the server default. */
  isolation?: string;
  /** The command timeout of its runs, in ms. */
  timeoutMs?: number;
  config?: unknown;
  files?: TemplateFile[];
  description?: string;
  createdAt: string;
  createdBy?: string;
  versions?: { version: number; createdAt: string; createdBy?: string; isolation?: string }[];
  /** In the answer of templates.create: true when no new version was made, the newest already holding what was saved. */
  existing?: boolean;
  /** What the version installs over its base (apt, pip, npm, run, files). */
  image?: WireTemplate["image"];
  /** The key of the image layer its recipe builds. */
  layer?: string;
  /** Its image's build: status "building", "ready" or "failed", the failed step, resolved packages. */
  build?: WireTemplate["build"];
  raw: WireTemplate;
}

/** An entry of a workspace directory. */
export interface FileInfo {
  name?: string;
  path: string;
  type: string;
  size: number;
  mode?: string | number;
  mtime?: string;
  raw: WireFileInfo;
}

/** A File of the graph: content-addressed, outlives sandboxes, names its origin. */
export interface GraphFile {
  id: string;
  sha256: string;
  size?: number;
  name?: string;
  origin?: Record<string, unknown>;
  createdAt?: string;
  raw: WireFile;
}

/** One quota of a graph: what it holds and the most it may. */
export interface Quota {
  usage: number;
  limit: number;
  unit: "count" | "bytes";
}

/**
 * A graph's quotas by name (running_sandboxes, sandboxes, stopped_sandboxes, stopped_disk_bytes,
 * checkpoints, checkpoint_bytes, files, file_bytes, snapshots, snapshot_bytes) and the caps of one call.
 */
export interface Quotas {
  graph: string;
  quotas: Record<string, Quota>;
  maxFileBytes: number;
  maxResultBytes: number;
  raw: WireQuotas;
}

/** One page of a list; pass nextCursor as cursor for the next. */
export interface Page<T> {
  data: T[];
  nextCursor?: string;
  raw: Record<string, unknown>;
}

// Mapping. `opt` keeps absent fields absent, so the values print as the server sent them.

type Obj = Record<string, unknown>;

function opt<K extends string, V>(key: K, v: V | undefined | null): { [P in K]?: V } {
  return (v === undefined || v === null ? {} : { [key]: v }) as { [P in K]?: V };
}

export function toOutput(w: Partial<WireOutput> | undefined | null): Output {
  return {
    head: w?.head ?? "",
    tail: w?.tail ?? "",
    bytes: w?.bytes ?? 0,
    ...opt("expired", w?.expired),
    ...opt("truncated", w?.truncated),
    ...opt("droppedBytes", w?.dropped_bytes),
  };
}

/**
 * The whole stream when the record kept all of it (whether the server keeps a short stream in
 * head, in tail, or in both), else head and tail joined by an ellipsis.
 */
export function outputText(o: Output): string {
  const enc = new TextEncoder();
  const hb = enc.encode(o.head).length;
  const tb = enc.encode(o.tail).length;
  if (o.bytes <= hb) return o.head;
  if (o.bytes <= tb) return o.tail;
  if (hb + tb === o.bytes) return o.head + o.tail;
  return `${o.head}\n…\n${o.tail}`;
}

export function toLimits(w: WireLimits | undefined | null): Limits | undefined {
  if (!w) return undefined;
  return { ...opt("memoryMib", w.memory_mib), ...opt("cpus", w.cpus), ...opt("pids", w.pids), ...opt("diskMib", w.disk_mib) };
}

export function fromLimits(l: Limits | undefined): WireLimits | undefined {
  if (!l) return undefined;
  return { ...opt("memory_mib", l.memoryMib), ...opt("cpus", l.cpus), ...opt("pids", l.pids), ...opt("disk_mib", l.diskMib) };
}

function toUsage(w: WireUsage | undefined | null): Usage | undefined {
  return w ? { vcpuMs: w.vcpu_ms, gibMs: w.gib_ms, ...opt("egress", toEgressUsage(w.egress)) } : undefined;
}

export function toEgressUsage(w: WireEgressUsage | undefined | null): EgressUsage | undefined {
  if (!w) return undefined;
  return {
    bytesOut: w.bytes_out,
    bytesIn: w.bytes_in,
    connections: w.connections,
    refused: w.refused,
    ...opt("quotaExceeded", w.quota_exceeded),
    ...opt("destinations", w.destinations),
  };
}

export function fromEgress(e: Egress | undefined): WireEgress | undefined {
  return e ? { mode: e.mode, ...opt("allow", e.allow), ...opt("quota_bytes", e.quotaBytes) } : undefined;
}

export function toEgress(w: WireEgress | undefined | null): Egress | undefined {
  return w ? { mode: w.mode, ...opt("allow", w.allow), ...opt("quotaBytes", w.quota_bytes) } : undefined;
}

function toTemplateRef(w: WireTemplateRef | undefined | null): TemplateRef | undefined {
  return w ? { id: w.id, name: w.name, version: w.version } : undefined;
}

export function toRunResult<R = unknown>(w: WireRunResult): RunResult<R> {
  return {
    ok: Boolean(w.ok),
    result: (w.result ?? null) as R,
    ...opt("resultTruncated", w.result_truncated),
    ...opt("resultBytes", w.result_bytes),
    ...opt("resultFile", w.result_file),
    ...opt("error", w.error),
    command: w.command,
    sandbox: w.sandbox,
    status: w.status,
    exitCode: w.exit_code ?? null,
    ...opt("signal", w.signal),
    durationMs: w.duration_ms ?? 0,
    stdout: toOutput(w.stdout),
    stderr: toOutput(w.stderr),
    ...opt("base", w.base),
    ...opt("template", toTemplateRef(w.template)),
    ...opt("limits", toLimits(w.limits)),
    ...opt("isolation", w.isolation || undefined),
    ...opt("timeoutMs", w.timeout_ms),
    ...opt("usage", toUsage(w.usage)),
    ...opt("createdAt", w.created_at),
    ...opt("startedAt", w.started_at),
    ...opt("finishedAt", w.finished_at),
    raw: w,
  };
}

/** The answer of a run that ended after a 202: the 202's body brought up to date by the command record. */
export function runFromCommand(prev: WireRunResult, cmd: WireCommand): WireRunResult {
  const skip = new Set(["id", "graph", "kind", "code", "input", "config", "env_names", "idempotency_key", "origin", "argv", "cwd", "stdin_bytes", "language"]);
  const merged: Obj = { ...prev };
  for (const [k, v] of Object.entries(cmd)) if (!skip.has(k)) merged[k] = v;
  merged.command = cmd.id || prev.command;
  if (!("result" in cmd)) merged.result = null;
  return merged as unknown as WireRunResult;
}

export function toCommand(w: WireCommand): Command {
  return {
    id: w.id,
    sandbox: w.sandbox,
    kind: w.kind,
    status: w.status,
    ok: Boolean(w.ok),
    exitCode: w.exit_code ?? null,
    ...opt("signal", w.signal),
    ...("result" in w ? { result: w.result } : {}),
    ...opt("resultTruncated", w.result_truncated),
    ...opt("resultBytes", w.result_bytes),
    ...opt("resultFile", w.result_file),
    ...opt("error", w.error),
    ...opt("argv", w.argv),
    ...opt("cwd", w.cwd),
    ...opt("stdinBytes", w.stdin_bytes),
    ...opt("template", toTemplateRef(w.template)),
    ...opt("envNames", w.env_names),
    ...opt("timeoutMs", w.timeout_ms),
    stdout: toOutput(w.stdout),
    stderr: toOutput(w.stderr),
    createdAt: w.created_at,
    ...opt("startedAt", w.started_at),
    ...opt("finishedAt", w.finished_at),
    durationMs: w.duration_ms ?? 0,
    raw: w,
  };
}

export function toSandboxInfo(w: WireSandbox): SandboxInfo {
  return {
    id: w.id,
    status: w.status,
    ...opt("oneCall", w.one_call),
    ...opt("base", w.base),
    ...opt("image", w.image),
    ...opt("template", toTemplateRef(w.template)),
    ...opt("limits", toLimits(w.limits)),
    ...opt("isolation", w.isolation || undefined),
    ...opt("envNames", w.env_names),
    ...opt("metadata", w.metadata),
    createdAt: w.created_at,
    ...opt("startedAt", w.started_at),
    ...opt("endedAt", w.ended_at),
    ...opt("expiresAt", w.expires_at),
    ...opt("endReason", w.end_reason),
    ...opt("error", w.error),
    ...opt("usage", toUsage(w.usage)),
    ...opt("pausedAt", w.paused_at || undefined),
    ...opt("forkedFrom", w.forked_from ? { sandbox: w.forked_from.sandbox, snapshot: w.forked_from.snapshot } : undefined),
    ...opt("egress", toEgress(w.egress)),
    ...opt("api", w.api ? { scopes: w.api.scopes, ...opt("maxRuns", w.api.max_runs), ...opt("key", w.api.key) } : undefined),
    ...opt("git", w.git),
    ...opt("session", w.session || undefined),
    ...opt("size", w.size || undefined),
    ...opt("workspace", w.workspace
      ? { sha256: w.workspace.sha256, bytes: w.workspace.bytes, diskBytes: w.workspace.disk_bytes, archivedAt: w.workspace.archived_at }
      : undefined),
    raw: w,
  };
}

export function toSnapshot(w: WireSnapshot): Snapshot {
  return {
    id: w.id,
    sandbox: w.sandbox,
    isolation: w.isolation,
    memory: Boolean(w.memory),
    sizeBytes: w.size_bytes ?? 0,
    createdAt: w.created_at,
    durationMs: w.duration_ms ?? 0,
    metadata: w.metadata ?? {},
    raw: w,
  };
}

export function toTemplate(w: WireTemplate): Template {
  return {
    id: w.id,
    name: w.name,
    version: w.version,
    base: w.base,
    ...opt("code", w.code),
    ...opt("limits", toLimits(w.limits)),
    ...opt("isolation", w.isolation || undefined),
    ...opt("timeoutMs", w.timeout_ms),
    ...("config" in w ? { config: w.config } : {}),
    ...opt("files", w.files?.map((f) => ({ file: f.file, path: f.path }))),
    ...opt("description", w.description),
    createdAt: w.created_at,
    ...opt("createdBy", w.created_by),
    ...opt("existing", w.existing),
    ...opt("layer", w.layer),
    ...opt("image", w.image),
    ...opt("build", w.build),
    ...opt(
      "versions",
      w.versions?.map((v) => ({
        version: v.version,
        createdAt: v.created_at,
        ...opt("createdBy", v.created_by),
        ...opt("isolation", v.isolation || undefined),
      })),
    ),
    raw: w,
  };
}

export function toFileInfo(w: WireFileInfo): FileInfo {
  return {
    ...opt("name", w.name),
    path: w.path ?? w.name ?? "",
    type: w.type,
    size: w.size ?? 0,
    ...opt("mode", w.mode),
    ...opt("mtime", w.mtime),
    raw: w,
  };
}

export function toGraphFile(w: WireFile): GraphFile {
  return {
    id: w.id,
    sha256: w.sha256,
    ...opt("size", w.size),
    ...opt("name", w.name),
    ...opt("origin", w.origin),
    ...opt("createdAt", w.created_at),
    raw: w,
  };
}

export function toQuotas(w: WireQuotas): Quotas {
  const quotas: Record<string, Quota> = {};
  for (const [name, q] of Object.entries(w.quotas as Record<string, WireQuota>)) quotas[name] = { usage: q.usage, limit: q.limit, unit: q.unit };
  return { graph: w.graph, quotas, maxFileBytes: w.max_file_bytes, maxResultBytes: w.max_result_bytes, raw: w };
}

/** Reads a list answer: `{"data": [...], "next_cursor": ...}` (or `entries`, `files`, `snapshots`), or a bare array. */
export function toPage<W, T>(body: unknown, map: (w: W) => T): Page<T> {
  if (Array.isArray(body)) return { data: (body as W[]).map(map), raw: {} };
  const o = (body ?? {}) as Obj;
  const items = (o.data ?? o.entries ?? o.files ?? o.snapshots ?? []) as W[];
  return { data: items.map(map), ...opt("nextCursor", (o.next_cursor as string | undefined) || undefined), raw: o };
}

export const DONE_STATUSES: ReadonlySet<string> = new Set(["succeeded", "failed", "timed_out", "killed", "lost", "oom", "disk_full"]);
