/**
 * The API's JSON as the server sends and takes it (snake_case), written by hand from the
 * OpenAPI document the server serves at GET /v1/openapi.json (internal/api/openapi.json) and
 * the records of DESIGN.md section 4.
 *
 * How they stay in step: each record type has a field list below that the compiler checks
 * against the interface (every field listed, none invented), and the server suite
 * (test/server.test.ts, "openapi") fetches the document from a real server and fails when a
 * route the SDK calls is missing or a response schema lacks a field listed here.
 */

export type CommandStatus =
  | "queued"
  | "running"
  | "succeeded"
  | "failed"
  | "timed_out"
  | "killed"
  | "lost"
  | "oom"
  | "disk_full";

export type SandboxStatus = "starting" | "running" | "paused" | "stopped" | "destroyed" | "failed";

export interface WireOutput {
  head: string;
  tail: string;
  bytes: number;
  expired?: boolean;
}

export interface WireLimits {
  memory_mib?: number;
  cpus?: number;
  pids?: number;
  disk_mib?: number;
}

export interface WireUsage {
  vcpu_ms: number;
  gib_ms: number;
}

export interface WireTemplateRef {
  id: string;
  name: string;
  version: number;
}

export interface WireOrigin {
  key?: string;
  workflow?: string;
  run?: string;
  step?: string;
}

/** The answer of a run: POST /v1/sandboxes with `run`, and POST /v1/sandboxes/{id}/run. */
export interface WireRunResult {
  ok: boolean;
  result: unknown;
  error?: string;
  command: string;
  sandbox: string;
  status: CommandStatus;
  exit_code: number | null;
  signal?: string;
  duration_ms: number;
  stdout: WireOutput;
  stderr: WireOutput;
  base: string;
  template?: WireTemplateRef;
  limits: WireLimits;
  /** "ns" or "gvisor": the call's, else its template version's, else the server default. */
  isolation?: string;
  timeout_ms: number;
  usage: WireUsage;
  created_at: string;
  started_at?: string;
  finished_at?: string;
}

/** A command record: GET /v1/commands/{id}, POST /v1/sandboxes/{id}/commands. */
export interface WireCommand {
  id: string;
  graph: string;
  sandbox: string;
  kind: "process" | "run";
  argv?: string[];
  cwd?: string;
  stdin_bytes?: number;
  language?: string;
  code?: string;
  input?: unknown;
  config?: unknown;
  template?: WireTemplateRef;
  env_names?: string[];
  timeout_ms: number;
  status: CommandStatus;
  ok: boolean;
  result?: unknown;
  error?: string;
  exit_code: number | null;
  signal?: string;
  stdout: WireOutput;
  stderr: WireOutput;
  idempotency_key?: string;
  origin: WireOrigin;
  created_at: string;
  started_at?: string;
  finished_at?: string;
  duration_ms: number;
}

/** A sandbox record: GET /v1/sandboxes/{id}; POST /v1/sandboxes without `run`. */
export interface WireSandbox {
  id: string;
  graph: string;
  status: SandboxStatus;
  one_call: boolean;
  base: string;
  image?: string;
  template?: WireTemplateRef;
  limits: WireLimits;
  /** "ns" or "gvisor": the call's, else its template version's, else the server default. */
  isolation?: string;
  env_names?: string[];
  metadata?: Record<string, string>;
  origin: WireOrigin;
  created_at: string;
  started_at?: string;
  ended_at?: string;
  expires_at?: string;
  end_reason?: string;
  error?: string;
  usage: WireUsage;
  /** When it was paused; only while it is. */
  paused_at?: string;
  /** The sandbox and snapshot a fork started from; only on forks. */
  forked_from?: WireForkedFrom;
}

export interface WireForkedFrom {
  sandbox: string;
  snapshot: string;
}

/** A memory snapshot: POST /v1/sandboxes/{id}/snapshot, GET and DELETE /v1/snapshots/{id}. */
export interface WireSnapshot {
  id: string;
  graph: string;
  sandbox: string;
  isolation: string;
  memory: boolean;
  size_bytes: number;
  created_at: string;
  duration_ms: number;
  metadata: Record<string, string>;
}

/** GET /v1/sandboxes/{id}/snapshots. */
export interface WireSnapshotList {
  snapshots: WireSnapshot[];
  next_cursor?: string;
}

export interface WireTemplateFile {
  file: string;
  path: string;
}

/** One version of a template: POST /v1/sandboxes/templates; GET adds `versions`. */
export interface WireTemplate {
  id: string;
  graph: string;
  name: string;
  version: number;
  base: string;
  code?: string;
  limits: WireLimits;
  /** The isolation its runs and sandboxes default to; omitted: the server default. */
  isolation?: string;
  timeout_ms?: number;
  config?: unknown;
  files?: WireTemplateFile[];
  description?: string;
  created_at: string;
  created_by?: string;
  versions?: WireTemplateVersion[];
}

/** An entry of a template's `versions`. */
export interface WireTemplateVersion {
  version: number;
  created_at: string;
  created_by?: string;
  isolation?: string;
}

/** An entry of GET /v1/sandboxes/{id}/files. */
export interface WireFileInfo {
  name?: string;
  path: string;
  type: string;
  size: number;
  mode?: string | number;
  mtime?: string;
}

/** A File of the graph: GET /v1/files/{id}. */
export interface WireFile {
  id: string;
  sha256: string;
  size?: number;
  name?: string;
  origin?: Record<string, unknown>;
  created_at?: string;
}

export interface WireList<T> {
  data: T[];
  next_cursor?: string;
}

// Request bodies, as the SDK sends them.

/** `run` of a one-call body: one call of run(input, config). */
export interface WireRunBody {
  code?: string;
  template?: string;
  input?: unknown;
  config?: unknown;
  base?: string;
  language?: string;
  env?: Record<string, string>;
  isolation?: string;
}

/** POST /v1/sandboxes: with `run` a one-call run, without it a long-lived sandbox. */
export interface WireCreateSandboxRequest {
  run?: WireRunBody;
  template?: string;
  base?: string;
  limits?: WireLimits;
  isolation?: string;
  timeout_ms?: number;
  wait_ms?: number;
  env?: Record<string, string>;
  metadata?: Record<string, string>;
  origin?: { workflow?: string; run?: string; step?: string };
  expires_in_seconds?: number;
}

/** POST /v1/sandboxes/templates. */
export interface WireTemplateRequest {
  name: string;
  base?: string;
  code?: string;
  limits?: WireLimits;
  isolation?: string;
  timeout_ms?: number;
  config?: unknown;
  files?: WireTemplateFile[];
  description?: string;
}

/** POST /v1/sandboxes/{id}/snapshot (the body is optional). */
export interface WireSnapshotRequest {
  metadata?: Record<string, string>;
}

/** POST /v1/sandboxes/{id}/fork (the body is optional). */
export interface WireForkRequest {
  snapshot?: string;
  metadata?: Record<string, string>;
  expires_in_seconds?: number;
  env?: Record<string, string>;
}

export interface WireError {
  error: { code: string; message: string; request_id: string };
}

// Field lists, checked against the interfaces by the compiler (see Exact below) and against the
// server's OpenAPI document by the server suite.

type Exact<T, L extends readonly (keyof T)[]> = Exclude<keyof T, L[number]> extends never ? L : never;

const runResultFields = [
  "ok", "result", "error", "command", "sandbox", "status", "exit_code", "signal", "duration_ms", "stdout", "stderr",
  "base", "template", "limits", "isolation", "timeout_ms", "usage", "created_at", "started_at", "finished_at",
] as const;
const commandFields = [
  "id", "graph", "sandbox", "kind", "argv", "cwd", "stdin_bytes", "language", "code", "input", "config", "template",
  "env_names", "timeout_ms", "status", "ok", "result", "error", "exit_code", "signal", "stdout", "stderr",
  "idempotency_key", "origin", "created_at", "started_at", "finished_at", "duration_ms",
] as const;
const sandboxFields = [
  "id", "graph", "status", "one_call", "base", "image", "template", "limits", "isolation", "env_names", "metadata", "origin",
  "created_at", "started_at", "ended_at", "expires_at", "end_reason", "error", "usage", "paused_at", "forked_from",
] as const;
const templateFields = [
  "id", "graph", "name", "version", "base", "code", "limits", "isolation", "timeout_ms", "config", "files", "description",
  "created_at", "created_by", "versions",
] as const;
const templateVersionFields = ["version", "created_at", "created_by", "isolation"] as const;
const forkedFromFields = ["sandbox", "snapshot"] as const;
const snapshotFields = [
  "id", "graph", "sandbox", "isolation", "memory", "size_bytes", "created_at", "duration_ms", "metadata",
] as const;
const snapshotListFields = ["snapshots", "next_cursor"] as const;
const runBodyFields = ["code", "template", "input", "config", "base", "language", "env", "isolation"] as const;
const createSandboxRequestFields = [
  "run", "template", "base", "limits", "isolation", "timeout_ms", "wait_ms", "env", "metadata", "origin", "expires_in_seconds",
] as const;
const templateRequestFields = [
  "name", "base", "code", "limits", "isolation", "timeout_ms", "config", "files", "description",
] as const;
const snapshotRequestFields = ["metadata"] as const;
const forkRequestFields = ["snapshot", "metadata", "expires_in_seconds", "env"] as const;

/** The fields of each request body the SDK sends, for checks against the OpenAPI document. */
export const WIRE_REQUEST_FIELDS: {
  runBody: Exact<WireRunBody, typeof runBodyFields>;
  createSandbox: Exact<WireCreateSandboxRequest, typeof createSandboxRequestFields>;
  template: Exact<WireTemplateRequest, typeof templateRequestFields>;
  snapshot: Exact<WireSnapshotRequest, typeof snapshotRequestFields>;
  fork: Exact<WireForkRequest, typeof forkRequestFields>;
} = {
  runBody: runBodyFields,
  createSandbox: createSandboxRequestFields,
  template: templateRequestFields,
  snapshot: snapshotRequestFields,
  fork: forkRequestFields,
};

/** The fields of each record, for checks against the OpenAPI document. */
export const WIRE_FIELDS: {
  runResult: Exact<WireRunResult, typeof runResultFields>;
  command: Exact<WireCommand, typeof commandFields>;
  sandbox: Exact<WireSandbox, typeof sandboxFields>;
  template: Exact<WireTemplate, typeof templateFields>;
  templateVersion: Exact<WireTemplateVersion, typeof templateVersionFields>;
  forkedFrom: Exact<WireForkedFrom, typeof forkedFromFields>;
  snapshot: Exact<WireSnapshot, typeof snapshotFields>;
  snapshotList: Exact<WireSnapshotList, typeof snapshotListFields>;
} = {
  runResult: runResultFields,
  command: commandFields,
  sandbox: sandboxFields,
  template: templateFields,
  templateVersion: templateVersionFields,
  forkedFrom: forkedFromFields,
  snapshot: snapshotFields,
  snapshotList: snapshotListFields,
};

/** The fields the server sends on every answer (the schema's `required`): the ones not
 * optional in the interfaces above. */
export const WIRE_REQUIRED = {
  runResult: ["ok", "result", "command", "sandbox", "status", "exit_code", "duration_ms", "stdout", "stderr", "base", "limits", "timeout_ms", "usage", "created_at"],
  command: ["id", "graph", "sandbox", "kind", "timeout_ms", "status", "ok", "exit_code", "stdout", "stderr", "origin", "created_at", "duration_ms"],
  sandbox: ["id", "graph", "status", "one_call", "base", "limits", "origin", "created_at", "usage"],
  template: ["id", "graph", "name", "version", "base", "limits", "created_at"],
  templateVersion: ["version", "created_at"],
  forkedFrom: ["sandbox", "snapshot"],
  snapshot: ["id", "graph", "sandbox", "isolation", "memory", "size_bytes", "created_at", "duration_ms", "metadata"],
  snapshotList: ["snapshots"],
} as const;
