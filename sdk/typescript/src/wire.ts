/**
 * The API's JSON as the server sends and takes it (snake_case): the schemas of the OpenAPI
 * document (internal/api/openapi.json), generated into src/openapi.ts by
 * scripts/openapi-types.mjs (openapi-typescript) and named here for the SDK.
 *
 * How they stay in step: the suite regenerates src/openapi.ts and fails when the committed file
 * differs (test/openapi.unit.test.ts), and the server suite (test/server.test.ts, "openapi")
 * fails when the server serves other schemas or a route the SDK calls answers another schema.
 * Where the SDK reads or sends a field more loosely than the document says (With below), it
 * says so.
 */

import type { components } from "./openapi.js";

type Schemas = components["schemas"];

/** T with the fields of U as U has them. */
type With<T, U> = Omit<T, keyof U> & U;

export type WireOutput = Schemas["Output"];
export type WireLimits = Schemas["Limits"];
export type WireUsage = Schemas["Usage"];
export type WireEgress = Schemas["Egress"];
export type WireEgressUsage = Schemas["EgressUsage"];
export type WireTemplateRef = Schemas["TemplateRef"];
export type WireOrigin = Schemas["Origin"];
export type WireBudget = Schemas["Budget"];
export type WireGrantRequest = Schemas["GrantRequest"];
/** A grant (POST /v1/grants); token only in the answer that minted it. */
export type WireGrant = Schemas["Grant"];
/** A workflow run's budget (PUT|GET /v1/budgets/{workflow}/{run}). */
export type WireWorkflowBudget = Schemas["WorkflowBudget"];
/** GET /v1/usage. */
export type WireUsageReport = Schemas["UsageReport"];
export type WireForkedFrom = Schemas["ForkedFrom"];
export type WireTemplateFile = Schemas["TemplateFile"];
export type WireTemplateVersion = Schemas["TemplateVersion"];

/** The answer of a run: POST /v1/sandboxes with `run`, and POST /v1/sandboxes/{id}/run. */
export type WireRunResult = Schemas["RunResult"];
/** A command record: GET /v1/commands/{id}, POST /v1/sandboxes/{id}/commands. */
export type WireCommand = Schemas["Command"];
export type CommandStatus = WireCommand["status"];
/** A sandbox record: GET /v1/sandboxes/{id}; POST /v1/sandboxes without `run`. */
export type WireSandbox = Schemas["Sandbox"];
export type SandboxStatus = WireSandbox["status"];
/** A memory snapshot: POST /v1/sandboxes/{id}/snapshot, GET and DELETE /v1/snapshots/{id}. */
export type WireSnapshot = Schemas["Snapshot"];
export type WirePreview = Schemas["Preview"];
export type WirePreviewRequest = Schemas["PreviewRequest"];
/** GET /v1/sandboxes/{id}/snapshots. */
export type WireSnapshotList = Schemas["SnapshotList"];
/** One version of a template: POST /v1/sandboxes/templates; GET adds `versions`. The document
 * types `config` as an object; it is any JSON value. */
export type WireTemplate = With<Schemas["Template"], { config?: unknown; versions?: WireTemplateVersion[] }>;
/** An entry of GET /v1/sandboxes/{id}/files. */
export type WireFileInfo = Schemas["FileEntry"];
/** A File of the graph: GET /v1/files/{id}. */
export type WireFile = Schemas["File"];
export type WireError = Schemas["Error"];
/** GET /v1/quotas. */
export type WireQuotas = Schemas["Quotas"];
export type WireQuota = Schemas["Quota"];

/** The code interpreter: POST /v1/sandboxes/{id}/contexts and /code. */
export type WireCodeContext = Schemas["CodeContext"];
export type WireCodeOutput = Schemas["CodeOutput"];
export type WireCodeResult = Schemas["CodeResult"];
export type WireCodeError = Schemas["CodeError"];

export interface WireList<T> {
  data: T[];
  next_cursor?: string;
}

// Request bodies, as the SDK sends them: any base and language name (the server answers one it
// does not know with 400), a template's config as any JSON value.

/** `run` of a one-call body: one call of run(input, config). */
export type WireRunBody = With<Schemas["RunBody"], { base?: string; language?: string }>;
/** POST /v1/sandboxes: with `run` a one-call run, without it a long-lived sandbox. */
export type WireCreateSandboxRequest = With<Schemas["CreateSandboxRequest"], { run?: WireRunBody }>;
/** A template version's image recipe, and GET /v1/sandboxes/templates/{name}/build. */
export type WireImageRecipe = Schemas["ImageRecipe"];
export type WireTemplateBuildView = Schemas["TemplateBuildView"];
/** POST /v1/sandboxes/templates. */
export type WireTemplateRequest = With<Schemas["TemplateRequest"], { base?: string; config?: unknown }>;
/** POST /v1/sandboxes/{id}/snapshot (the body is optional). */
export type WireSnapshotRequest = Schemas["SnapshotRequest"];
/** POST /v1/sandboxes/{id}/fork (the body is optional). */
export type WireForkRequest = Schemas["ForkRequest"];
