/**
 * TypeScript client for lbb: run code you did not write in an isolated sandbox, in one call.
 *
 * ```ts
 * import { LbbClient } from "@littlebigbrain/client";
 *
 * const lbb = new LbbClient({ baseUrl: process.env.LBB_URL, apiKey: process.env.LBB_API_KEY, graph: "main" });
 * const run = await lbb.sandboxes.run({ code: "def run(input, config):\n    return sum(input)", input: [1, 2, 3] });
 * run.result;  // 6
 * run.command; // "cmd_…", the record of this run
 * ```
 */

export { runStep, grantFor, stepKey } from "./step.js";
export type { StepId } from "./step.js";
export {
  LbbClient,
  Sandboxes,
  Sandbox,
  SandboxFiles,
  SandboxCommands,
  Templates,
  Commands,
  Files,
  Snapshots,
  Transport,
  VERSION,
  backoffMs,
} from "./client.js";
export type {
  ClientOptions,
  CallOptions,
  IdempotentCallOptions,
  RunParams,
  SandboxRunParams,
  CreateTemplateParams,
  CreateSandboxParams,
  SandboxSpec,
  CreateCommandParams,
  RunCommandParams,
  RunCommandOptions,
  SnapshotParams,
  PreviewParams,
  Preview,
  ForkParams,
  Origin,
  StreamOptions,
  StdinResult,
  Json,
  Data,
} from "./client.js";
export { SandboxCode } from "./code.js";
export { SandboxPty, Terminal } from "./terminal.js";
export type { AttachTerminalParams, CreateTerminalParams, TerminalExit } from "./terminal.js";
export type { CodeContext, CodeError, CodeOutput, CodeResult, CreateContextParams, RunCellOptions } from "./code.js";
export type { RunCodeParams } from "./client.js";
export * from "./errors.js";
export type { ServerSentEvent } from "./sse.js";
export { SSEDecoder } from "./sse.js";
export type {
  Output,
  Limits,
  Usage,
  Egress,
  EgressUsage,
  APIGrant,
  GitClone,
  TemplateRef,
  RunResult,
  Command,
  CommandResult,
  CommandStatus,
  SandboxInfo,
  SandboxStatus,
  ForkedFrom,
  WorkspaceArchive,
  Snapshot,
  Template,
  TemplateFile,
  FileInfo,
  GraphFile,
  Page,
  Quota,
  Quotas,
} from "./types.js";
export { outputText } from "./types.js";
export type * from "./wire.js";
