"""What the sync and the async client share: options, request bodies, retries, idempotency keys."""

from __future__ import annotations

import json
import os
import random
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Sequence, Union
from urllib.parse import urlencode, urlsplit

from ._version import __version__

DEFAULT_BASE_URL = "http://127.0.0.1:7700"
DEFAULT_GRAPH = "main"
DEFAULT_TIMEOUT = 120.0
DEFAULT_MAX_RETRIES = 3
# How long one long-poll of GET /v1/commands/{id} asks the server to wait.
POLL_WAIT_MS = 30_000
# Statuses worth a retry with the same request (and Idempotency-Key): the server or a proxy
# in front of it could not take the call now.
RETRY_STATUSES = frozenset({429, 502, 503, 504})
# Codes of answers with a retry status that no retry helps: a quota stays full until
# something is deleted.
NO_RETRY_CODES = frozenset({"quota_exceeded"})
# Methods that change state: each logical call gets one Idempotency-Key, kept on its retries.
MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})

USER_AGENT = f"lbb-python/{__version__}"

JSON = Any
Limits = Mapping[str, Union[int, float]]
Data = Union[str, bytes, bytearray, memoryview]


@dataclass
class Options:
    base_url: str
    api_key: Optional[str]
    graph: str
    timeout: float
    max_retries: int
    headers: Dict[str, str] = field(default_factory=dict)


def resolve_options(
    base_url: Optional[str],
    api_key: Optional[str],
    graph: Optional[str],
    timeout: Optional[float],
    max_retries: Optional[int],
    headers: Optional[Mapping[str, str]],
) -> Options:
    """Fills in the defaults: LBB_URL, LBB_API_KEY and LBB_GRAPH, then the local server and the
    admin key it saved (DESIGN.md section 5)."""
    url = (base_url or os.environ.get("LBB_URL") or DEFAULT_BASE_URL).rstrip("/")
    key = api_key if api_key is not None else os.environ.get("LBB_API_KEY") or None
    if key is None and _is_local(url):
        key = _saved_admin_key()
    return Options(
        base_url=url,
        api_key=key,
        graph=graph or os.environ.get("LBB_GRAPH") or DEFAULT_GRAPH,
        timeout=DEFAULT_TIMEOUT if timeout is None else timeout,
        max_retries=DEFAULT_MAX_RETRIES if max_retries is None else max_retries,
        headers=dict(headers or {}),
    )


def _is_local(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    return host in ("127.0.0.1", "localhost", "::1")


def _saved_admin_key() -> Optional[str]:
    path = os.path.join(os.environ.get("LBB_DATA_DIR") or "/var/lib/lbb", "admin.key")
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().strip() or None
    except OSError:
        return None


def terminal_url(opts: Options, sandbox_id: str, query: Sequence[Any]) -> str:
    """The WebSocket URL of GET /v1/sandboxes/{id}/pty (ws:// or wss:// after the base URL)."""
    base = opts.base_url
    if base.startswith("https://"):
        base = "wss://" + base[len("https://") :]
    elif base.startswith("http://"):
        base = "ws://" + base[len("http://") :]
    return f"{base}/v1/sandboxes/{sandbox_id}/pty?" + urlencode([("graph", opts.graph), *query])


def base_headers(opts: Options) -> Dict[str, str]:
    h = {"User-Agent": USER_AGENT, "Accept": "application/json"}
    if opts.api_key:
        h["Authorization"] = f"Bearer {opts.api_key}"
    h.update(opts.headers)
    return h


def retryable(status: int, content: bytes) -> bool:
    """Whether an answer is worth a retry of the same request."""
    if status not in RETRY_STATUSES:
        return False
    if status == 429 and b"quota_exceeded" in content:
        try:
            return json.loads(content)["error"]["code"] not in NO_RETRY_CODES
        except (ValueError, KeyError, TypeError):
            return True
    return True


def new_idempotency_key() -> str:
    return str(uuid.uuid4())


def backoff(attempt: int, retry_after: Optional[str] = None) -> float:
    """Seconds to wait before retry number attempt+1: the server's Retry-After when it gave one
    (up to 30 s), else exponential from 0.25 s to 8 s with jitter."""
    if retry_after:
        try:
            return min(max(float(retry_after), 0.0), 30.0)
        except ValueError:
            pass
    return float(min(8.0, 0.25 * 2.0**attempt) * (0.5 + random.random() / 2))


def request_timeout(opts: Options, wait_ms: Optional[int]) -> float:
    """A read timeout that outlasts the server-side wait a call asks for."""
    if wait_ms is None:
        return opts.timeout
    return max(opts.timeout, wait_ms / 1000 + 30)


def clean(d: Mapping[str, Any]) -> Dict[str, Any]:
    """Drops the fields left as None, so the server applies its defaults."""
    return {k: v for k, v in d.items() if v is not None}


def run_body(
    *,
    code: Optional[str],
    input: JSON,
    config: JSON,
    template: Optional[str],
    base: Optional[str],
    language: Optional[str],
    env: Optional[Mapping[str, str]],
    isolation: Optional[str] = None,
    egress: Optional[Mapping[str, Any]] = None,
    script: Optional[str] = None,
) -> Dict[str, Any]:
    if code is not None and template is not None:
        raise ValueError("run takes code or template, not both")
    if code is None and template is None and script is None:
        raise ValueError("run needs code or template")
    return clean(
        {
            "code": code,
            "script": script,
            "template": template,
            "input": input,
            "config": config,
            "base": base,
            "language": language,
            "env": env,
            "isolation": isolation,
            "egress": dict(egress) if egress is not None else None,
        }
    )


def one_call_body(
    run: Dict[str, Any],
    *,
    limits: Optional[Limits],
    timeout_ms: Optional[int],
    wait_ms: Optional[int],
    metadata: Optional[Mapping[str, str]],
    origin: Optional[Mapping[str, str]] = None,
) -> Dict[str, Any]:
    return clean({"run": run, "limits": limits, "timeout_ms": timeout_ms, "wait_ms": wait_ms, "metadata": metadata, "origin": origin})


def sandbox_spec(spec: Optional[Mapping[str, Any]], kwargs: Mapping[str, Any]) -> Dict[str, Any]:
    """The body of POST /v1/sandboxes for a long-lived sandbox, from a dict, keywords or both."""
    body = dict(spec or {})
    body.update(kwargs)
    if "run" in body:
        raise ValueError("a sandbox spec has no run; use sandboxes.run for a one-call run")
    return clean(body)


def to_argv(cmd: Union[str, Sequence[str]]) -> list:
    """A command as argv: a list of strings as it is, a shell line (``"ls -l | wc -l"``) as
    ``bash -lc`` running it."""
    if isinstance(cmd, str):
        return ["bash", "-lc", cmd]
    if isinstance(cmd, (bytes, bytearray)):
        raise TypeError('a command is a shell line (str) or argv (a list of str), e.g. "ls -l | wc -l" or ["python", "upper.py"]')
    return list(cmd)


def command_body(
    argv: Union[str, Sequence[str]],
    *,
    env: Optional[Mapping[str, str]],
    cwd: Optional[str],
    stdin: Optional[Data],
    wait_ms: Optional[int],
    timeout_ms: Optional[int],
    stdin_open: Optional[bool] = None,
    stream: Optional[bool] = None,
) -> Dict[str, Any]:
    body = clean(
        {
            "argv": to_argv(argv),
            "env": env,
            "cwd": cwd,
            "wait_ms": wait_ms,
            "timeout_ms": timeout_ms,
            "stdin_open": stdin_open or None,
            "stream": stream or None,
        }
    )
    if stdin is not None:
        if isinstance(stdin, str):
            body["stdin"] = stdin
        else:
            raw = bytes(stdin)
            try:
                body["stdin"] = raw.decode("utf-8")
            except UnicodeDecodeError:
                import base64

                body["stdin_base64"] = base64.b64encode(raw).decode()
    return body


def sandbox_run_body(
    run: Dict[str, Any], *, timeout_ms: Optional[int], wait_ms: Optional[int]
) -> Dict[str, Any]:
    body = dict(run)
    body.update(clean({"timeout_ms": timeout_ms, "wait_ms": wait_ms}))
    return body


def template_body(
    *,
    name: str,
    base: Optional[str],
    code: Optional[str],
    limits: Optional[Limits],
    timeout_ms: Optional[int],
    config: Optional[Mapping[str, Any]],
    files: Optional[Sequence[Mapping[str, str]]],
    description: Optional[str],
    isolation: Optional[str] = None,
    egress: Optional[Mapping[str, Any]] = None,
) -> Dict[str, Any]:
    return clean(
        {
            "name": name,
            "base": base,
            "code": code,
            "limits": limits,
            "isolation": isolation,
            "egress": dict(egress) if egress is not None else None,
            "timeout_ms": timeout_ms,
            "config": config,
            "files": [dict(f) for f in files] if files is not None else None,
            "description": description,
        }
    )


def snapshot_body(metadata: Optional[Mapping[str, str]]) -> Dict[str, Any]:
    return clean({"metadata": dict(metadata) if metadata is not None else None})


def fork_body(
    *,
    snapshot: Optional[str],
    metadata: Optional[Mapping[str, str]],
    expires_in_seconds: Optional[int],
    env: Optional[Mapping[str, str]],
) -> Dict[str, Any]:
    return clean(
        {
            "snapshot": snapshot,
            "metadata": dict(metadata) if metadata is not None else None,
            "expires_in_seconds": expires_in_seconds,
            "env": dict(env) if env is not None else None,
        }
    )


def to_bytes(data: Data) -> bytes:
    if isinstance(data, str):
        return data.encode("utf-8")
    return bytes(data)


def sandbox_id_of(body: Mapping[str, Any]) -> str:
    sid = body.get("id") or body.get("sandbox")
    if isinstance(sid, Mapping):
        sid = sid.get("id")
    if not sid:
        raise ValueError(f"the server's answer names no sandbox id: {dict(body)!r}")
    return str(sid)


def label_params(label: Union[None, str, Sequence[str], Mapping[str, str]]) -> Optional[Sequence[str]]:
    """?label=key=value, repeated: from a mapping, a "key=value" string or a list of them."""
    if label is None:
        return None
    if isinstance(label, Mapping):
        return [f"{k}={v}" for k, v in label.items()]
    if isinstance(label, str):
        return [label]
    return list(label)


def list_params(**kw: Any) -> Dict[str, Any]:
    return clean(kw)
