/**
 * Typed errors: the server's error codes and statuses, mapped back to classes.
 *
 * Every error of the API is `{"error": {"code", "message", "request_id"}}` with a status; the
 * class follows the status (the server maps its error classes to statuses in one place) and a
 * few stable codes get a subclass of their own.
 */

export interface LbbErrorOptions {
  code?: string;
  status?: number;
  requestId?: string;
  body?: unknown;
  cause?: unknown;
}

/** Base of every error this SDK throws. */
export class LbbError extends Error {
  /** The server's stable error code: `not_found`, `idempotency_key_reused`, … */
  readonly code: string;
  /** The HTTP status; undefined when no answer arrived. */
  readonly status: number | undefined;
  /** The request's id, to quote in a report. */
  readonly requestId: string | undefined;
  /** The answer's body, parsed when it was JSON. */
  readonly body: unknown;

  constructor(message: string, options: LbbErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = options.code ?? "error";
    this.status = options.status;
    this.requestId = options.requestId;
    this.body = options.body;
  }

  override toString(): string {
    const tag = this.status === undefined ? this.code : `${this.status} ${this.code}`;
    return `${this.name}: ${this.message} (${tag}${this.requestId ? `, request ${this.requestId}` : ""})`;
  }
}

/**
 * Bytes of a streamed command's output did not reach this client: the server let go of them
 * because the client read nothing for minutes. `command` is the record, with what came;
 * `lostBytes` how many bytes did not come.
 */
export class OutputLostError extends LbbError {
  constructor(
    message: string,
    readonly command: unknown,
    readonly lostBytes: number,
  ) {
    super(message, { code: "output_lost" });
  }
}

/** No answer from the server: it could not be reached, or the connection broke (after retries). */
export class APIConnectionError extends LbbError {}
/** The server did not answer in time (after retries). */
export class APITimeoutError extends APIConnectionError {}
/** The server answered with an error status. */
export class APIStatusError extends LbbError {}
/** 400: the request is malformed, or asks for more than the server's caps (code `limit_exceeded`). */
export class InvalidRequestError extends APIStatusError {}
/** 400 `idempotency_key_required`. */
export class IdempotencyKeyRequiredError extends InvalidRequestError {}
/** 400 `path_outside_workspace`: a file path resolves outside /workspace. */
export class PathOutsideWorkspaceError extends InvalidRequestError {}
/** 400 `isolation_unavailable`: the isolation asked for ("gvisor") is known but this server cannot run it; the message names what is missing. */
export class IsolationUnavailableError extends InvalidRequestError {}
/** 401: the API key is missing, unknown or revoked. */
export class AuthenticationError extends APIStatusError {}
/** 403: the key may not use this graph, or lacks the scope of this call. */
export class PermissionDeniedError extends APIStatusError {}
/** 404: no such record in this graph (another graph's ids are not found too). */
export class NotFoundError extends APIStatusError {}
/** 409: the request clashes with the state of a record. */
export class ConflictError extends APIStatusError {}
/** 409 `not_supported`: the sandbox's isolation cannot do this (memory snapshots and forks need isolation "gvisor"). */
export class NotSupportedError extends ConflictError {}
/** 409 `commands_running`: a run(input, config) still runs in the sandbox, whose stream a snapshot or fork cannot carry (processes are carried). */
export class CommandsRunningError extends ConflictError {}
/** 409 `file_in_use`: a template version names the File, so it stays. */
export class FileInUseError extends ConflictError {}
/** 413: the body or file is larger than the server takes. */
export class PayloadTooLargeError extends APIStatusError {}
/** 413 `quota_bytes_exceeded`: the call would take the graph past a byte quota (the message names it, its usage and limit); deleting something makes room. */
export class QuotaBytesExceededError extends PayloadTooLargeError {}
/** 422: the request is well-formed but cannot be done. */
export class UnprocessableError extends APIStatusError {}
/** 422 `idempotency_key_reused`: the key was used before with a different request. */
export class IdempotencyConflictError extends UnprocessableError {}
/** 429: a limit is reached; retry later with the same Idempotency-Key. */
export class RateLimitError extends APIStatusError {}
/** 429 `too_many_sandboxes`: the graph has as many running sandboxes as it may. */
export class TooManySandboxesError extends RateLimitError {}
/** 429 `too_many_runs`: the host's queue of one-call runs waiting for capacity is full; retried with the same Idempotency-Key after Retry-After. */
export class TooManyRunsError extends RateLimitError {}
/** 429 `quota_exceeded`: the call would take the graph past a count quota (the message names it, its usage and limit); deleting something makes room, so it is not retried. */
export class QuotaExceededError extends RateLimitError {}
/** 401 `grant_expired`: the grant's token is past its expiry; mint one for the next attempt. */
export class GrantExpiredError extends AuthenticationError {}
/** 401 `grant_revoked`: the grant (or the key that minted it) was revoked. */
export class GrantRevokedError extends AuthenticationError {}
/** 402: a budget or spend cap is spent; nothing ran. */
export class PaymentRequiredError extends APIStatusError {}
/** 402 `budget_exceeded`: the grant's or workflow run's budget is spent. */
export class BudgetExceededError extends PaymentRequiredError {}
/** 402 `spend_cap_reached`: the key reached its spend cap for the period. */
export class SpendCapReachedError extends PaymentRequiredError {}
/** 5xx other than 503: the server failed. */
export class InternalServerError extends APIStatusError {}
/** 503: the service cannot do this now; a retry later may work. */
export class UnavailableError extends APIStatusError {}

type StatusErrorClass = new (message: string, options?: LbbErrorOptions) => APIStatusError;

const byStatus: Record<number, StatusErrorClass> = {
  400: InvalidRequestError,
  401: AuthenticationError,
  402: PaymentRequiredError,
  403: PermissionDeniedError,
  404: NotFoundError,
  405: InvalidRequestError,
  409: ConflictError,
  413: PayloadTooLargeError,
  422: UnprocessableError,
  429: RateLimitError,
  503: UnavailableError,
};

const byCode: Record<string, StatusErrorClass> = {
  idempotency_key_required: IdempotencyKeyRequiredError,
  idempotency_key_reused: IdempotencyConflictError,
  path_outside_workspace: PathOutsideWorkspaceError,
  too_many_sandboxes: TooManySandboxesError,
  too_many_runs: TooManyRunsError,
  isolation_unavailable: IsolationUnavailableError,
  not_supported: NotSupportedError,
  commands_running: CommandsRunningError,
  quota_exceeded: QuotaExceededError,
  quota_bytes_exceeded: QuotaBytesExceededError,
  file_in_use: FileInUseError,
  grant_expired: GrantExpiredError,
  grant_revoked: GrantRevokedError,
  budget_exceeded: BudgetExceededError,
  spend_cap_reached: SpendCapReachedError,
};

const defaultCodes: Record<number, string> = {
  400: "invalid_request",
  401: "unauthorized",
  402: "payment_required",
  403: "forbidden",
  404: "not_found",
  409: "conflict",
  413: "payload_too_large",
  422: "unprocessable",
  429: "limit_exceeded",
  503: "unavailable",
};

/** The error class for an answer with status and code. */
export function errorClass(status: number, code: string): StatusErrorClass {
  const forCode = byCode[code];
  const forStatus = byStatus[status];
  if (forCode && forStatus && forCode.prototype instanceof forStatus) return forCode;
  if (forStatus) return forStatus;
  if (status >= 500) return InternalServerError;
  return APIStatusError;
}

/** Builds the typed error for an answer with an error status. */
export function errorFromBody(status: number, text: string, requestIdHeader?: string | null): APIStatusError {
  let code = defaultCodes[status] ?? (status >= 500 ? "internal" : "error");
  let message = "";
  let requestId = requestIdHeader ?? undefined;
  let body: unknown;
  try {
    body = text ? JSON.parse(text) : undefined;
  } catch {
    body = undefined;
  }
  if (body && typeof body === "object" && "error" in body) {
    const err = (body as { error?: unknown }).error;
    if (err && typeof err === "object") {
      const e = err as { code?: unknown; message?: unknown; request_id?: unknown };
      if (typeof e.code === "string" && e.code) code = e.code;
      if (typeof e.message === "string") message = e.message;
      if (typeof e.request_id === "string" && e.request_id) requestId = e.request_id;
    }
  }
  if (!message) message = text.trim().slice(0, 500) || `HTTP ${status}`;
  const Cls = errorClass(status, code);
  return new Cls(message, { code, status, requestId, body });
}
