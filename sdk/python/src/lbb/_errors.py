"""Typed errors: the server's error codes and statuses, mapped back to exception classes.

Every error of the API is `{"error": {"code", "message", "request_id"}}` with a status; the
class follows the status (the server maps its error classes to statuses in one place) and a
few stable codes get a subclass of their own.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Mapping, Optional, Type


class LbbError(Exception):
    """Base of every error this SDK raises.

    ``code`` is the server's stable error code (``not_found``, ``idempotency_key_reused``, …),
    ``message`` its human-readable text, ``request_id`` the id to quote in a report and
    ``status`` the HTTP status (``None`` when no answer arrived).
    """

    def __init__(
        self,
        message: str,
        *,
        code: str = "error",
        status: Optional[int] = None,
        request_id: Optional[str] = None,
        body: Any = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.request_id = request_id
        self.body = body

    def __str__(self) -> str:
        parts = [self.message]
        tag = self.code if self.status is None else f"{self.status} {self.code}"
        parts.append(f"({tag}")
        if self.request_id:
            parts[-1] += f", request {self.request_id}"
        parts[-1] += ")"
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status!r}, message={self.message!r}, request_id={self.request_id!r})"


class OutputLostError(LbbError):
    """Bytes of a streamed command's output did not reach this client: the server let go of
    them because the client read nothing for minutes. ``command`` is the record (with what
    came), ``lost_bytes`` how many bytes did not come."""

    def __init__(self, message: str, *, command: Any, lost_bytes: int) -> None:
        super().__init__(message, code="output_lost")
        self.command = command
        self.lost_bytes = lost_bytes


class APIConnectionError(LbbError):
    """No answer from the server: it could not be reached, or the connection broke (after retries)."""


class APITimeoutError(APIConnectionError):
    """The server did not answer in time (after retries)."""


class APIStatusError(LbbError):
    """The server answered with an error status."""


class InvalidRequestError(APIStatusError):
    """400: the request is malformed, or asks for more than the server's caps (code ``limit_exceeded``)."""


class IdempotencyKeyRequiredError(InvalidRequestError):
    """400 ``idempotency_key_required``: a call that runs code came without an Idempotency-Key."""


class PathOutsideWorkspaceError(InvalidRequestError):
    """400 ``path_outside_workspace``: a file path resolves outside /workspace."""


class IsolationUnavailableError(InvalidRequestError):
    """400 ``isolation_unavailable``: the isolation asked for (``"gvisor"``) is known but this
    server cannot run it; the message names what is missing."""


class AuthenticationError(APIStatusError):
    """401: the API key is missing, unknown or revoked."""


class PermissionDeniedError(APIStatusError):
    """403: the key may not use this graph, or lacks the scope of this call."""


class NotFoundError(APIStatusError):
    """404: no such record in this graph (another graph's ids are not found too)."""


class ConflictError(APIStatusError):
    """409: the request clashes with the state of a record (e.g. a stopped sandbox)."""


class NotSupportedError(ConflictError):
    """409 ``not_supported``: the sandbox's isolation cannot do this (memory snapshots and
    forks need ``isolation="gvisor"``)."""


class CommandsRunningError(ConflictError):
    """409 ``commands_running``: a run(input, config) still runs in the sandbox, whose stream a
    snapshot or fork cannot carry; end or wait for it first (processes are carried: pause,
    snapshot and fork keep them)."""


class FileInUseError(ConflictError):
    """409 ``file_in_use``: a template version names the File, so it stays."""


class PayloadTooLargeError(APIStatusError):
    """413: the body or file is larger than the server takes."""


class QuotaBytesExceededError(PayloadTooLargeError):
    """413 ``quota_bytes_exceeded``: the call would take the graph past one of its byte quotas;
    the message names it, its usage and limit. Deleting something makes room; a retry alone does not."""


class UnprocessableError(APIStatusError):
    """422: the request is well-formed but cannot be done."""


class IdempotencyConflictError(UnprocessableError):
    """422 ``idempotency_key_reused``: the Idempotency-Key was used before with a different request."""


class RateLimitError(APIStatusError):
    """429: a limit of the graph or key is reached; retry later with the same Idempotency-Key."""


class TooManySandboxesError(RateLimitError):
    """429 ``too_many_sandboxes``: the graph has as many running sandboxes as it may."""


class TooManyRunsError(RateLimitError):
    """429 ``too_many_runs``: the host's queue of one-call runs waiting for capacity is full."""


class QuotaExceededError(RateLimitError):
    """429 ``quota_exceeded``: the call would take the graph past one of its count quotas; the
    message names it, its usage and limit. Deleting something makes room; it is not retried."""


class GrantExpiredError(AuthenticationError):
    """401 ``grant_expired``: the grant's token is past its expiry; mint one for the next attempt."""


class GrantRevokedError(AuthenticationError):
    """401 ``grant_revoked``: the grant (or the key that minted it) was revoked."""


class PaymentRequiredError(APIStatusError):
    """402: a budget or spend cap is spent; nothing ran."""


class BudgetExceededError(PaymentRequiredError):
    """402 ``budget_exceeded``: the grant's or workflow run's budget is spent; nothing ran."""


class SpendCapReachedError(PaymentRequiredError):
    """402 ``spend_cap_reached``: the key reached its spend cap for the period; nothing ran."""


class InternalServerError(APIStatusError):
    """5xx other than 503: the server failed."""


class UnavailableError(APIStatusError):
    """503: the service cannot do this now (draining, store down); a retry later may work."""


_BY_CODE: Dict[str, Type[APIStatusError]] = {
    "idempotency_key_required": IdempotencyKeyRequiredError,
    "idempotency_key_reused": IdempotencyConflictError,
    "path_outside_workspace": PathOutsideWorkspaceError,
    "too_many_sandboxes": TooManySandboxesError,
    "too_many_runs": TooManyRunsError,
    "isolation_unavailable": IsolationUnavailableError,
    "not_supported": NotSupportedError,
    "commands_running": CommandsRunningError,
    "quota_exceeded": QuotaExceededError,
    "quota_bytes_exceeded": QuotaBytesExceededError,
    "file_in_use": FileInUseError,
    "grant_expired": GrantExpiredError,
    "grant_revoked": GrantRevokedError,
    "budget_exceeded": BudgetExceededError,
    "spend_cap_reached": SpendCapReachedError,
}

_BY_STATUS: Dict[int, Type[APIStatusError]] = {
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
}

_DEFAULT_CODES: Dict[int, str] = {
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
}


def error_class(status: int, code: str) -> Type[APIStatusError]:
    """The exception class for an error answer."""
    cls = _BY_CODE.get(code)
    if cls is not None and _BY_STATUS.get(status) in cls.__mro__:
        return cls
    if status in _BY_STATUS:
        return _BY_STATUS[status]
    if status >= 500:
        return InternalServerError
    return APIStatusError


def error_from_body(status: int, content: bytes, headers: Optional[Mapping[str, str]] = None) -> APIStatusError:
    """Builds the typed error for an answer with an error status."""
    body: Any = None
    code = _DEFAULT_CODES.get(status, "internal" if status >= 500 else "error")
    message = ""
    request_id = headers.get("request-id") if headers is not None else None
    try:
        body = json.loads(content) if content else None
    except ValueError:
        body = None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        code = str(err.get("code") or code)
        message = str(err.get("message") or "")
        request_id = err.get("request_id") or request_id
    if not message:
        text = content.decode("utf-8", "replace").strip() if content else ""
        message = text[:500] or f"HTTP {status}"
    return error_class(status, code)(message, code=code, status=status, request_id=request_id, body=body)
