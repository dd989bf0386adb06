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
  timeout_ms?: number;
  config?: unknown;
  files?: WireTemplateFile[];
  description?: string;
  created_at: string;
  created_by?: string;
  versions?: { version: number; created_at: string; created_by?: string }[];
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

export interface WireError {
  error: { code: string; message: string; request_id: string };
}

// Field lists, checked against the interfaces by the compiler (see Exact below) and against the
// server's OpenAPI document by the server suite.

type Exact<T, L extends readonly (keyof T)[]> = Exclude<keyof T, L[number]> extends never ? L : never;

const runResultFields = [
  "ok", "result", "error", "command", "sandbox", "status", "exit_code", "signal", "duration_ms", "stdout", "stderr",
  "base", "template", "limits", "timeout_ms", "usage", "created_at", "started_at", "finished_at",
] as const;
const commandFields = [
  "id", "graph", "sandbox", "kind", "argv", "cwd", "stdin_bytes", "language", "code", "input", "config", "template",
  "env_names", "timeout_ms", "status", "ok", "result", "error", "exit_code", "signal", "stdout", "stderr",
  "idempotency_key", "origin", "created_at", "started_at", "finished_at", "duration_ms",
] as const;
const sandboxFields = [
  "id", "graph", "status", "one_call", "base", "image", "template", "limits", "env_names", "metadata", "origin",
  "created_at", "started_at", "ended_at", "expires_at", "end_reason", "error", "usage",
] as const;
const templateFields = [
  "id", "graph", "name", "version", "base", "code", "limits", "timeout_ms", "config", "files", "description",
  "created_at", "created_by", "versions",
] as const;

/** The fields of each record, for checks against the OpenAPI document. */
export const WIRE_FIELDS: {
  runResult: Exact<WireRunResult, typeof runResultFields>;
  command: Exact<WireCommand, typeof commandFields>;
  sandbox: Exact<WireSandbox, typeof sandboxFields>;
  template: Exact<WireTemplate, typeof templateFields>;
} = { runResult: runResultFields, command: commandFields, sandbox: sandboxFields, template: templateFields };

/** The fields the server sends on every answer (the schema's `required`): the ones not
 * optional in the interfaces above. */
export const WIRE_REQUIRED = {
  runResult: ["ok", "result", "command", "sandbox", "status", "exit_code", "duration_ms", "stdout", "stderr", "base", "limits", "timeout_ms", "usage", "created_at"],
  command: ["id", "graph", "sandbox", "kind", "timeout_ms", "status", "ok", "exit_code", "stdout", "stderr", "origin", "created_at", "duration_ms"],
  sandbox: ["id", "graph", "status", "one_call", "base", "limits", "origin", "created_at", "usage"],
  template: ["id", "graph", "name", "version", "base", "limits", "created_at"],
} as const;
