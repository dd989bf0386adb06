/**
 * A workflow step's lbb call that runs once, whatever engine runs the workflow: give it the
 * engine's own stable ids (workflow, run, step), which it keeps across retries and recovery.
 * The call's Idempotency-Key is derived from them, so a step retried after a worker crash gets
 * the first attempt's record back instead of running again; each attempt calls with a grant of
 * its own (POST /v1/grants), its origin stamped on every record and its budget counted.
 *
 * ```ts
 * const run = await runStep(lbb, { workflow: wfId, step: "transform", attempt }, { code, input });
 * ```
 */

import type { LbbClient, RunParams } from "./client.js";
import type { RunResult } from "./types.js";
import type { WireBudget } from "./wire.js";

/** One step of one run of a workflow, as the engine names it. */
export interface StepId {
  /** The workflow's id, as the engine keeps it. */
  workflow: string;
  /** The workflow's run (default: the workflow's id); PUT /v1/budgets/{workflow}/{run} counts it. */
  run?: string;
  /** The step's id within the run, stable across retries. */
  step: string;
  /** The engine's attempt number, stamped on the records. */
  attempt?: number;
  /** The attempt's grant's budget. */
  budget?: WireBudget;
  /** The grant's lifetime in seconds (default the server's, 15 min; at most 3600). */
  ttlSeconds?: number;
}

/** The step's Idempotency-Key: the same for every attempt, and the same as sdk/go/step's Key. */
export async function stepKey(s: StepId): Promise<string> {
  const data = new TextEncoder().encode(`${s.workflow}\u0000${s.run ?? s.workflow}\u0000${s.step}`);
  const h = new Uint8Array(await globalThis.crypto.subtle.digest("SHA-256", data));
  return `step-${Array.from(h.slice(0, 16), (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

/** Mints the attempt's grant and answers a client that calls with it. */
export async function grantFor(lbb: LbbClient, s: StepId): Promise<LbbClient> {
  const g = await lbb.mintGrant({
    name: `step ${s.step}`,
    ttl_seconds: s.ttlSeconds,
    budget: s.budget,
    origin: { workflow: s.workflow, run: s.run ?? s.workflow, step: s.step, attempt: s.attempt === undefined ? undefined : String(s.attempt) },
  });
  if (!g.token) throw new Error("lbb: the grant came without its token");
  return lbb.withApiKey(g.token);
}

/** Runs code once for the step, in a sandbox of its own (a one-call run). */
export async function runStep<R = unknown>(lbb: LbbClient, s: StepId, p: RunParams): Promise<RunResult<R>> {
  const g = await grantFor(lbb, s);
  return g.sandboxes.run<R>({ ...p, origin: undefined, idempotencyKey: await stepKey(s) });
}
