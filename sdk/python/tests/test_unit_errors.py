"""Error answers map to typed exceptions carrying code, message and request_id (no server needed)."""

import json

import pytest

import lbb
from lbb._errors import error_from_body

from fakeserver import FakeServer, error

CASES = [
    (400, "invalid_request", lbb.InvalidRequestError),
    (400, "limit_exceeded", lbb.InvalidRequestError),
    (400, "idempotency_key_required", lbb.IdempotencyKeyRequiredError),
    (400, "path_outside_workspace", lbb.PathOutsideWorkspaceError),
    (400, "isolation_unavailable", lbb.IsolationUnavailableError),
    (401, "unauthorized", lbb.AuthenticationError),
    (403, "forbidden", lbb.PermissionDeniedError),
    (404, "not_found", lbb.NotFoundError),
    (409, "conflict", lbb.ConflictError),
    (409, "not_supported", lbb.NotSupportedError),
    (409, "commands_running", lbb.CommandsRunningError),
    (409, "file_in_use", lbb.FileInUseError),
    (413, "payload_too_large", lbb.PayloadTooLargeError),
    (413, "quota_bytes_exceeded", lbb.QuotaBytesExceededError),
    (422, "unprocessable", lbb.UnprocessableError),
    (422, "idempotency_key_reused", lbb.IdempotencyConflictError),
    (429, "limit_exceeded", lbb.RateLimitError),
    (429, "too_many_sandboxes", lbb.TooManySandboxesError),
    (429, "too_many_runs", lbb.TooManyRunsError),
    (429, "quota_exceeded", lbb.QuotaExceededError),
    (500, "internal", lbb.InternalServerError),
    (503, "unavailable", lbb.UnavailableError),
    # A code whose class does not fit the status: the status decides.
    (404, "too_many_sandboxes", lbb.NotFoundError),
    (400, "not_supported", lbb.InvalidRequestError),
    (418, "teapot", lbb.APIStatusError),
]


@pytest.mark.parametrize("status,code,cls", CASES)
def test_error_classes(status, code, cls):
    body = json.dumps({"error": {"code": code, "message": "what failed", "request_id": "req_1"}}).encode()
    e = error_from_body(status, body, {})
    assert type(e) is cls
    assert isinstance(e, lbb.LbbError)
    assert (e.status, e.code, e.message, e.request_id) == (status, code, "what failed", "req_1")
    assert "what failed" in str(e) and code in str(e) and "req_1" in str(e)


def test_error_not_json():
    e = error_from_body(502, b"<html>bad gateway</html>", {"request-id": "req_h"})
    assert isinstance(e, lbb.InternalServerError)
    assert e.code == "internal" and "bad gateway" in e.message and e.request_id == "req_h"
    e = error_from_body(404, b"", {})
    assert isinstance(e, lbb.NotFoundError) and e.code == "not_found" and e.message == "HTTP 404"


def test_errors_raised_by_the_client():
    def handler(seen, nth):
        if seen.path == "/v1/commands/cmd_missing":
            return error(404, "not_found", "command cmd_missing not found", "req_404")
        return error(401, "unauthorized", "unknown API key", "req_401")

    with FakeServer(handler) as srv:
        c = lbb.LbbClient(srv.url, api_key="k", max_retries=0)
        with pytest.raises(lbb.NotFoundError) as ei:
            c.commands.get("cmd_missing")
        assert ei.value.request_id == "req_404" and ei.value.status == 404
        with pytest.raises(lbb.AuthenticationError):
            c.sandboxes.run(code="x", input=1)


def test_connection_error_after_retries():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens here now
    c = lbb.LbbClient(f"http://127.0.0.1:{port}", api_key="k", max_retries=1)
    with pytest.raises(lbb.APIConnectionError) as ei:
        c.sandboxes.run(code="x")
    assert ei.value.status is None and ei.value.code == "connection_error"


def test_quota_exceeded_is_not_retried():
    """A quota stays full until something is deleted: 429 quota_exceeded is raised at once,
    while 429 too_many_sandboxes is retried."""
    calls = {"n": 0}

    def handler(seen, nth):
        calls["n"] += 1
        if seen.path == "/v1/files":
            return error(429, "quota_exceeded", "graph main: quota files (Files of the graph) exceeded: usage 2, limit 2", "req_q")
        return error(429, "too_many_sandboxes", "graph main has 10 running sandboxes", "req_t")

    with FakeServer(handler) as srv:
        c = lbb.LbbClient(srv.url, api_key="k", max_retries=2)
        with pytest.raises(lbb.QuotaExceededError) as ei:
            c.files.upload(b"x", name="x")
        assert calls["n"] == 1 and "usage 2, limit 2" in ei.value.message
        calls["n"] = 0
        with pytest.raises(lbb.TooManySandboxesError):
            c.sandboxes.run(code="x", input=1)
        assert calls["n"] == 3
