"""The asyncio client, :class:`AsyncLbbClient`.

The synchronous client (_client.py) is generated from this file by scripts/unasync.py: edit
this one, then run the script; a test fails when the two drift apart.
"""

from __future__ import annotations

import asyncio  # async only
import inspect  # async only
import json as _json
import time
from types import TracebackType
from typing import (
    IO,
    Any,
    Callable,
    Dict,
    AsyncIterator,
    List,
    Awaitable,  # async only
    Mapping,
    Optional,
    Sequence,
    Type,
    TypeVar,
    Union,
    overload,
)

import httpx

from . import _core, _ws
from ._commands import CommandStream
from ._core import JSON, Data, Limits
from ._errors import APIConnectionError, APITimeoutError, LbbError, NotFoundError, error_from_body
from ._models import (
    CodeResult,
    Command,
    File,
    FileInfo,
    Page,
    Preview,
    Quotas,
    Record,
    RunResult,
    SandboxRecord,
    Snapshot,
    Template,
    page_of,
    run_from_command,
)
from ._sse import LineSplitter, SSEDecoder, ServerSentEvent

T = TypeVar("T")
_RETRYABLE = (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError)


class _API:
    """Sends requests: auth, graph, Idempotency-Key, retries and typed errors."""

    def __init__(self, opts: _core.Options, http: Optional[httpx.AsyncClient]) -> None:
        self.opts = opts
        self._own = http is None
        self.http = http or httpx.AsyncClient(timeout=httpx.Timeout(opts.timeout, connect=10.0))
        self.headers = _core.base_headers(opts)

    async def aclose(self) -> None:
        if self._own:
            await self.http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Optional[Mapping[str, Any]] = None,
        json: Any = None,
        content: Optional[Union[bytes, AsyncIterator[bytes]]] = None,
        headers: Optional[Mapping[str, str]] = None,
        idempotency_key: Optional[str] = None,
        timeout: Optional[float] = None,
        graph: bool = True,
        retry: bool = True,
    ) -> httpx.Response:
        url = self.opts.base_url + path
        q: Dict[str, Any] = {"graph": self.opts.graph} if graph else {}
        q.update(_core.clean(params or {}))
        h = dict(self.headers)
        h.update(headers or {})
        if method in _core.MUTATING:
            # One key per logical call, the same on every retry of it: the server runs the code
            # at most once for it.
            h["Idempotency-Key"] = idempotency_key or _core.new_idempotency_key()
        # A body read from a stream cannot be sent twice.
        retries = self.opts.max_retries if retry and (content is None or isinstance(content, bytes)) else 0
        t = httpx.Timeout(timeout if timeout is not None else self.opts.timeout, connect=10.0)
        attempt = 0
        while True:
            try:
                resp = await self.http.request(method, url, params=q, json=json, content=content, headers=h, timeout=t)
            except _RETRYABLE as e:
                if attempt >= retries:
                    cls = APITimeoutError if isinstance(e, httpx.TimeoutException) else APIConnectionError
                    raise cls(f"{method} {path}: {type(e).__name__}: {e}", code="connection_error") from e
                await asyncio.sleep(_core.backoff(attempt))
                attempt += 1
                continue
            if attempt < retries and _core.retryable(resp.status_code, resp.content):
                await asyncio.sleep(_core.backoff(attempt, resp.headers.get("retry-after")))
                attempt += 1
                continue
            if resp.status_code >= 400:
                raise error_from_body(resp.status_code, resp.content, resp.headers)
            return resp

    async def json(self, method: str, path: str, **kw: Any) -> Any:
        resp = await self.request(method, path, **kw)
        if not resp.content.strip():
            return {}
        return resp.json()

    async def events(
        self, path: str, params: Mapping[str, Any], *, method: str = "GET", json: Any = None, idempotency_key: Optional[str] = None
    ) -> AsyncIterator[ServerSentEvent]:
        """Reads a server-sent event stream; after a broken connection it reconnects with
        Last-Event-ID, so no event comes twice (it gives up when the server sent no ids). A
        stream that a POST starts is resumed by the same POST with the same Idempotency-Key."""
        url = self.opts.base_url + path
        q = {"graph": self.opts.graph, **_core.clean(params)}
        last_id: Optional[str] = None
        attempt = 0
        if method in _core.MUTATING:
            idempotency_key = idempotency_key or _core.new_idempotency_key()
        while True:
            h = dict(self.headers, Accept="text/event-stream")
            if idempotency_key:
                h["Idempotency-Key"] = idempotency_key
            if last_id is not None:
                h["Last-Event-ID"] = last_id
            dec = SSEDecoder()
            try:
                async with self.http.stream(method, url, params=q, json=json, headers=h, timeout=httpx.Timeout(None, connect=10.0)) as resp:
                    if resp.status_code >= 400:
                        await resp.aread()
                        if resp.status_code in _core.RETRY_STATUSES and attempt < self.opts.max_retries:
                            await asyncio.sleep(_core.backoff(attempt, resp.headers.get("retry-after")))
                            attempt += 1
                            continue
                        raise error_from_body(resp.status_code, resp.content, resp.headers)
                    split = LineSplitter()
                    async for chunk in resp.aiter_bytes():
                        for line in split.feed(chunk):
                            ev = dec.feed(line)
                            if dec.last_id is not None:
                                last_id = dec.last_id
                            if ev is not None:
                                attempt = 0
                                yield ev
                    for line in split.flush():
                        ev = dec.feed(line)
                        if ev is not None:
                            yield ev
                    ev = dec.feed("")  # a last event the server did not end with a blank line
                    if ev is not None:
                        yield ev
                    return
            except _RETRYABLE as e:
                if last_id is None or attempt >= self.opts.max_retries:
                    raise APIConnectionError(f"GET {path}: the stream broke: {e}", code="connection_error") from e
                await asyncio.sleep(_core.backoff(attempt))
                attempt += 1


async def _wait_command(api: _API, cmd_id: str, timeout: Optional[float]) -> Command:
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        wait_ms = _core.POLL_WAIT_MS
        if deadline is not None:
            left = deadline - time.monotonic()
            wait_ms = max(0, min(wait_ms, int(left * 1000)))
        cmd = Command(await api.json("GET", f"/v1/commands/{cmd_id}", params={"wait_ms": wait_ms}, timeout=_core.request_timeout(api.opts, wait_ms)))
        if cmd.done or (deadline is not None and time.monotonic() >= deadline):
            return cmd


async def _finish_run(api: _API, resp: httpx.Response, wait: bool) -> RunResult:
    run = RunResult(resp.json())
    if wait and (resp.status_code == 202 or run.status in ("queued", "running")) and run.command:
        run = run_from_command(run, await _wait_command(api, run.command, None))
    return run


class AsyncTemplates:
    """Saved versions of code, limits and default config (``/v1/sandboxes/templates``)."""

    def __init__(self, api: _API) -> None:
        self._api = api

    async def create(
        self,
        name: str,
        *,
        base: Optional[str] = None,
        code: Optional[str] = None,
        limits: Optional[Limits] = None,
        timeout_ms: Optional[int] = None,
        config: Optional[Mapping[str, Any]] = None,
        files: Optional[Sequence[Mapping[str, str]]] = None,
        description: Optional[str] = None,
        isolation: Optional[str] = None,
        egress: Optional[Mapping[str, Any]] = None,
        image: Optional[Mapping[str, Any]] = None,
    ) -> Template:
        """Saves a new version of the template ``name``; answers the version saved.
        ``isolation`` (``"ns"``, ``"gvisor"``) is what its runs and sandboxes default to, and
        ``egress`` (``{"mode": "allowlist", "allow": ["pkgs.example.org"], "quota_bytes": …}``) their
        route out unless a call names one. ``image`` (``{"apt": [...], "pip": [...], "npm": [...],
        "run": [...], "files": [{"file": …, "path": "/abs"}]}``) is what the version installs over
        its base: the answer comes at once, building; ``build`` follows it."""
        body = _core.template_body(
            name=name,
            base=base,
            code=code,
            limits=limits,
            timeout_ms=timeout_ms,
            config=config,
            files=files,
            description=description,
            isolation=isolation,
            egress=egress,
            image=image,
        )
        return Template(await self._api.json("POST", "/v1/sandboxes/templates", json=body))

    async def build(self, name: str) -> Record:
        """The build of a version with an image recipe (``"name"`` or ``"name@3"``): ``status``
        (building, ready, failed), ``step`` and ``error`` of a failed one, ``resolved`` package
        versions and ``log``."""
        return Record(await self._api.json("GET", f"/v1/sandboxes/templates/{name}/build"))

    async def list(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> Page[Template]:
        """The newest version of each template of the graph; ``page.raw["bases"]`` lists the base templates."""
        return page_of(Template, await self._api.json("GET", "/v1/sandboxes/templates", params={"limit": limit, "cursor": cursor}))

    async def get(self, name: str) -> Template:
        """A template's newest version (``"name@3"`` pins one), with ``versions``; or a base (``"lbb/python"``)."""
        return Template(await self._api.json("GET", f"/v1/sandboxes/templates/{name}"))


class AsyncSandboxFiles:
    """The files of one sandbox's workspace (/workspace)."""

    def __init__(self, api: _API, sandbox_id: str) -> None:
        self._api = api
        self._id = sandbox_id

    async def write(self, path: str, data: Union[Data, IO[bytes]], *, idempotency_key: Optional[str] = None) -> Record:
        """Writes a file (relative to /workspace, or absolute inside it); str is written as UTF-8."""
        content: Union[bytes, AsyncIterator[bytes]] = _chunks(data) if hasattr(data, "read") else _core.to_bytes(data)  # type: ignore[arg-type]
        return Record(
            await self._api.json(
                "PUT",
                f"/v1/sandboxes/{self._id}/files/content",
                params={"path": path},
                content=content,
                headers={"Content-Type": "application/octet-stream"},
                idempotency_key=idempotency_key,
            )
        )

    async def read(self, path: str) -> bytes:
        """The bytes of a file."""
        return (await self._api.request("GET", f"/v1/sandboxes/{self._id}/files/content", params={"path": path})).content

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The text of a file."""
        return (await self.read(path)).decode(encoding)

    async def list(self, path: str = ".", *, recursive: Optional[bool] = None) -> Page[FileInfo]:
        """The entries of a directory, with type, size, mode and mtime."""
        params = {"path": path, "recursive": "true" if recursive else None}
        return page_of(FileInfo, await self._api.json("GET", f"/v1/sandboxes/{self._id}/files", params=params))

    async def delete(self, path: str, *, recursive: Optional[bool] = None) -> None:
        """Removes a file, symlink or directory; a directory that is not empty needs ``recursive=True``."""
        params = {"path": path, "recursive": "true" if recursive else None}
        await self._api.request("DELETE", f"/v1/sandboxes/{self._id}/files", params=params)

    async def mkdir(self, path: str) -> FileInfo:
        """Makes a directory and its parents; answers its entry."""
        return FileInfo(await self._api.json("POST", f"/v1/sandboxes/{self._id}/files/mkdir", params={"path": path}))

    async def keep(self, path: str, *, idempotency_key: Optional[str] = None) -> File:
        """Keeps a workspace file as a File of the graph, which outlives the sandbox."""
        return File(
            await self._api.json(
                "POST", "/v1/files", params={"source_sandbox": self._id, "source_path": path}, idempotency_key=idempotency_key
            )
        )

    async def import_file(self, sha256: str, path: str, *, idempotency_key: Optional[str] = None) -> Record:
        """Copies a File of the graph (by its sha256) into the workspace at path."""
        return Record(
            await self._api.json(
                "PUT",
                "/v1/sandboxes/files/content",
                params={"sandbox": self._id, "path": path, "source_sha256": sha256},
                idempotency_key=idempotency_key,
            )
        )


async def _chunks(f: IO[bytes], size: int = 1 << 16) -> AsyncIterator[bytes]:
    while True:
        b = await asyncio.to_thread(f.read, size)
        if not b:
            return
        yield b


class AsyncCommands:
    """Command records, by id (``/v1/commands``)."""

    def __init__(self, api: _API) -> None:
        self._api = api

    async def get(self, command_id: str, *, wait_ms: Optional[int] = None) -> Command:
        """A command record; with wait_ms the server waits up to that long for it to end."""
        return Command(
            await self._api.json(
                "GET", f"/v1/commands/{command_id}", params={"wait_ms": wait_ms}, timeout=_core.request_timeout(self._api.opts, wait_ms)
            )
        )

    async def wait(self, command_id: str, *, timeout: Optional[float] = None) -> Command:
        """Waits until the command ends (or timeout seconds pass) and answers its record."""
        return await _wait_command(self._api, command_id, timeout)

    async def list(
        self, *, sandbox: Optional[str] = None, status: Optional[str] = None, limit: Optional[int] = None, cursor: Optional[str] = None
    ) -> Page[Command]:
        return page_of(
            Command, await self._api.json("GET", "/v1/commands", params={"sandbox": sandbox, "status": status, "limit": limit, "cursor": cursor})
        )

    def stream(self, command_id: str, *, stream: str = "stdout", follow: bool = True) -> AsyncIterator[ServerSentEvent]:
        """The command's output as server-sent events: what is kept, then live chunks, then its
        exit. ``stream`` is ``"stdout"``, ``"stderr"`` or ``"both"``."""
        return self._api.events(f"/v1/commands/{command_id}/output", {"stream": stream, "follow": "true" if follow else "false"})

    async def kill(self, command_id: str, *, signal: Optional[str] = None) -> Command:
        return Command(await self._api.json("POST", f"/v1/commands/{command_id}/kill", json=_core.clean({"signal": signal})))

    async def write_stdin(self, command_id: str, data: Data = b"", *, close: bool = False) -> Record:
        """Writes to the stdin of a running command started with ``stdin_open=True`` (str as UTF-8);
        ``close=True`` closes it after, so the process reads end of file. Answers ``bytes``
        (written by this call), ``total`` and ``closed``. Not retried: bytes are never sent twice."""
        return Record(
            await self._api.json(
                "POST",
                f"/v1/commands/{command_id}/stdin",
                params={"close": "true" if close else "false"},
                content=_core.to_bytes(data),
                headers={"Content-Type": "application/octet-stream"},
                retry=False,
            )
        )


class AsyncSandboxCommands:
    """The commands of one sandbox."""

    def __init__(self, api: _API, sandbox_id: str) -> None:
        self._api = api
        self._id = sandbox_id
        self._commands = AsyncCommands(api)

    async def create(
        self,
        argv: Union[str, Sequence[str]],
        *,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Optional[Data] = None,
        stdin_open: bool = False,
        wait_ms: Optional[int] = None,
        timeout_ms: Optional[int] = None,
        idempotency_key: Optional[str] = None,
    ) -> Command:
        """Starts a process: argv (a list), or a shell line (``"ls -l | wc -l"``, run as
        ``bash -lc``). With wait_ms the answer waits up to that long for it to end; the record
        says ``status`` (``running`` if it has not) and holds head and tail of its output.
        ``stdin_open=True`` keeps stdin open for :meth:`write_stdin`."""
        body = _core.command_body(argv, env=env, cwd=cwd, stdin=stdin, wait_ms=wait_ms, timeout_ms=timeout_ms, stdin_open=stdin_open)
        return Command(
            await self._api.json(
                "POST",
                f"/v1/sandboxes/{self._id}/commands",
                json=body,
                idempotency_key=idempotency_key,
                timeout=_core.request_timeout(self._api.opts, wait_ms),
            )
        )

    async def run(
        self,
        cmd: Union[str, Sequence[str], None] = None,
        *,
        argv: Optional[Sequence[str]] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Optional[Data] = None,
        timeout_ms: Optional[int] = None,
        on_stdout: Optional[Callable[[str], Any]] = None,
        on_stderr: Optional[Callable[[str], Any]] = None,
        output_limit: Optional[int] = None,
        idempotency_key: Optional[str] = None,
    ) -> Command:
        """Runs a command to its end, like E2B's and Daytona's ``commands.run``: a shell line
        (``"ls -l | wc -l"``, run as ``bash -lc``) or argv (a list). Its output streams from
        its first byte: ``on_stdout`` and ``on_stderr`` get every chunk as it comes (text; a
        chunk never ends inside a character), and none of it is lost, the server making the
        process wait while this client is behind. With ``output_limit`` the answer's
        ``stdout.text`` and ``stderr.text`` are the streams as they came, up to that many bytes
        each (``truncated`` says the limit cut one); without, the record's head and tail.

        A command that fails is an answer (``status``, ``exit_code``), not an error. Raises
        :class:`OutputLostError` if output did not come (the client read nothing for minutes).
        ``argv=`` (a list) is the name this argument had before it took shell lines."""
        if (cmd is None) == (argv is None):
            raise TypeError("commands.run takes a command: a shell line or argv (a list), e.g. \"ls -l | wc -l\"")
        body = _core.command_body(cmd if cmd is not None else argv, env=env, cwd=cwd, stdin=stdin, wait_ms=None, timeout_ms=timeout_ms, stream=True)
        reader = CommandStream(output_limit)
        callbacks = {"stdout": on_stdout, "stderr": on_stderr}
        async for ev in self._api.events(f"/v1/sandboxes/{self._id}/commands", {}, method="POST", json=body, idempotency_key=idempotency_key):
            chunk = reader.feed(ev)
            if chunk is not None and callbacks[chunk[0]] is not None:
                res = callbacks[chunk[0]](chunk[1])  # type: ignore[misc]
                if inspect.isawaitable(res):  # async only
                    await res  # async only
        return reader.result()

    async def list(self, *, status: Optional[str] = None, limit: Optional[int] = None, cursor: Optional[str] = None) -> Page[Command]:
        return page_of(
            Command, await self._api.json("GET", f"/v1/sandboxes/{self._id}/commands", params={"status": status, "limit": limit, "cursor": cursor})
        )

    async def get(self, command_id: str, *, wait_ms: Optional[int] = None) -> Command:
        return await self._commands.get(command_id, wait_ms=wait_ms)

    async def wait(self, command_id: str, *, timeout: Optional[float] = None) -> Command:
        return await self._commands.wait(command_id, timeout=timeout)

    def stream(self, command_id: str, *, stream: str = "stdout", follow: bool = True) -> AsyncIterator[ServerSentEvent]:
        return self._commands.stream(command_id, stream=stream, follow=follow)

    async def kill(self, command_id: str, *, signal: Optional[str] = None) -> Command:
        return await self._commands.kill(command_id, signal=signal)

    async def write_stdin(self, command_id: str, data: Data = b"", *, close: bool = False) -> Record:
        return await self._commands.write_stdin(command_id, data, close=close)


class AsyncSandboxCode:
    """The code interpreter of one sandbox: stateful contexts (a Jupyter kernel for Python)
    where variables, imports and functions stay from one cell to the next."""

    def __init__(self, api: _API, sandbox_id: str) -> None:
        self._api = api
        self._id = sandbox_id

    async def run(
        self,
        code: str,
        *,
        context: Optional[str] = None,
        language: Optional[str] = None,
        timeout_ms: Optional[int] = None,
        on_stdout: Optional[Callable[[str], Any]] = None,
        on_stderr: Optional[Callable[[str], Any]] = None,
        on_result: Optional[Callable[[Record], Any]] = None,
        on_error: Optional[Callable[[Record], Any]] = None,
        idempotency_key: Optional[str] = None,
    ) -> CodeResult:
        """Runs a cell in ``context`` (without one, the sandbox's default context of
        ``language``, python when absent): ``sb.code.run("x = 1")``, then
        ``sb.code.run("x + 1").text`` is ``"2"``. A cell that raises is an answer (``error``),
        not an exception; at ``timeout_ms`` it is interrupted and the context lives on. With a
        callback the answer streams, each callback getting its events as they come."""
        body = _core.clean({"code": code, "context": context, "language": language, "timeout_ms": timeout_ms})
        path = f"/v1/sandboxes/{self._id}/code"
        if on_stdout is None and on_stderr is None and on_result is None and on_error is None:
            return CodeResult(await self._api.json("POST", path, json=body, idempotency_key=idempotency_key, timeout=_core.request_timeout(self._api.opts, timeout_ms)))
        callbacks: Dict[str, Any] = {"stdout": on_stdout, "stderr": on_stderr, "result": on_result, "display": on_result, "error": on_error}
        body["stream"] = True
        async for ev in self._api.events(path, {}, method="POST", json=body, idempotency_key=idempotency_key):
            data = _json.loads(ev.data) if ev.data else {}
            if ev.event == "end":
                return CodeResult(data)
            if ev.event == "error" and "error" in data:
                raise LbbError(data["error"].get("message", "the cell's stream failed"))
            cb = callbacks.get(ev.event)
            if cb is None:
                continue
            res = cb(data["text"] if ev.event in ("stdout", "stderr") else Record(data))
            if inspect.isawaitable(res):  # async only
                await res  # async only
        raise LbbError("the cell's stream ended without its end event")

    async def create_context(self, *, language: Optional[str] = None, cwd: Optional[str] = None, env: Optional[Mapping[str, str]] = None) -> Record:
        """Starts a context and answers once its interpreter is ready."""
        body = _core.clean({"language": language, "cwd": cwd, "env": dict(env) if env is not None else None})
        return Record(await self._api.json("POST", f"/v1/sandboxes/{self._id}/contexts", json=body))

    async def contexts(self) -> List[Record]:
        """The sandbox's contexts, oldest first."""
        return [Record(c) for c in (await self._api.json("GET", f"/v1/sandboxes/{self._id}/contexts"))["data"]]

    async def restart_context(self, context_id: str) -> Record:
        """Starts a context's interpreter afresh: its state is gone."""
        return Record(await self._api.json("POST", f"/v1/sandboxes/{self._id}/contexts/{context_id}/restart"))

    async def delete_context(self, context_id: str) -> Record:
        """Ends a context."""
        return Record(await self._api.json("DELETE", f"/v1/sandboxes/{self._id}/contexts/{context_id}"))


class AsyncTerminal:
    """A terminal in a sandbox, attached over a WebSocket (``GET /v1/sandboxes/{id}/pty``).

    ``send`` what is typed (``"\\x03"`` is Ctrl-C), ``resize`` it, read its output with
    ``read`` or by iterating (``async for chunk in term``; chunks are bytes, the iteration
    ends when the terminal does), or ``wait`` for its end with an ``on_data`` callback.
    ``exit_code`` is its exit status once it has ended (128+n for signal n) and ``exit`` the
    whole ``exit`` message. ``close`` detaches: the terminal lives on for the server's
    terminal grace (two minutes by default), in which ``sandbox.pty.attach(term.id)``
    re-attaches and first reads its recent output. As a context manager it detaches at the
    end of the block."""

    def __init__(self, conn: _ws.AsyncConn, sandbox_id: str, started: Mapping[str, Any]) -> None:
        self._conn = conn
        self.sandbox_id = sandbox_id
        self.id: str = started.get("terminal", "")
        self.exit: Optional[Record] = None

    def __repr__(self) -> str:
        return f"AsyncTerminal(id={self.id!r}, sandbox_id={self.sandbox_id!r})"

    @property
    def exit_code(self) -> Optional[int]:
        """The exit status once the terminal has ended, else None."""
        return None if self.exit is None else self.exit.get("exit_code")

    async def send(self, data: Data) -> None:
        """Types ``data`` (str is sent as UTF-8) into the terminal."""
        b = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        if b:
            await self._conn.send(_ws.BINARY, b)

    async def resize(self, cols: int, rows: int) -> None:
        """Sets the terminal's size; its foreground program gets SIGWINCH."""
        if not (0 < cols <= 65535 and 0 < rows <= 65535):
            raise ValueError("cols and rows must be from 1 to 65535")
        await self._conn.send(_ws.TEXT, _json.dumps({"type": "resize", "cols": int(cols), "rows": int(rows)}).encode())

    async def read(self, timeout: Optional[float] = None) -> Optional[bytes]:
        """The next chunk of output; None once the terminal has ended (``exit_code`` says how).
        Raises TimeoutError when nothing came in ``timeout`` seconds (nothing is lost: read
        again), :class:`APIConnectionError` when the connection dropped before the end."""
        while True:
            try:
                op, payload = await self._conn.recv(timeout)
            except _ws.Closed as e:
                if self.exit is not None:
                    return None
                raise APIConnectionError(f"terminal {self.id}: the connection closed ({e.code} {e.reason})", code="connection_error") from None
            if op == _ws.BINARY:
                return payload
            try:
                m = _json.loads(payload)
            except ValueError:
                continue
            if isinstance(m, dict) and m.get("type") == "exit":
                self.exit = Record(m)

    async def wait(self, on_data: Optional[Callable[[bytes], Any]] = None, *, timeout: Optional[float] = None) -> Optional[int]:
        """Reads the terminal's output to its end, each chunk to ``on_data``, and answers its
        exit status. ``timeout`` bounds the wait for each chunk, not the whole."""
        while True:
            chunk = await self.read(timeout)
            if chunk is None:
                return self.exit_code
            if on_data is not None:
                res = on_data(chunk)
                if inspect.isawaitable(res):  # async only
                    await res  # async only

    async def close(self) -> None:
        """Detaches; the terminal runs on for the server's grace period."""
        await self._conn.close(1000, "detached")

    def __aiter__(self) -> "AsyncTerminal":
        return self

    async def __anext__(self) -> bytes:
        chunk = await self.read()
        if chunk is None:
            raise StopAsyncIteration
        return chunk

    async def __aenter__(self) -> "AsyncTerminal":
        return self

    async def __aexit__(self, et: Optional[Type[BaseException]], e: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        await self.close()


class AsyncSandboxPty:
    """The sandbox's terminals: ``create`` one (a login shell, or ``argv``), or ``attach`` to
    one still running by its id."""

    def __init__(self, api: _API, sandbox_id: str) -> None:
        self._api = api
        self._id = sandbox_id

    async def create(
        self,
        *,
        cols: Optional[int] = None,
        rows: Optional[int] = None,
        argv: Optional[Sequence[str]] = None,
        cwd: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        term: Optional[str] = None,
        timeout: Optional[float] = None,
    ) -> AsyncTerminal:
        """Opens a terminal on a real pty: ``argv`` (default a login shell) in ``cwd`` with
        ``env``, ``cols`` × ``rows`` (default 80×24) and ``TERM`` = ``term`` (default
        xterm-256color). It is a command record of kind ``terminal`` (``term.id``)."""
        q: List[Any] = [("argv", a) for a in (argv or [])]
        q += [("env", f"{k}={v}") for k, v in (env or {}).items()]
        q += [(k, v) for k, v in (("cwd", cwd), ("term", term)) if v]
        return await self._dial(q, cols, rows, timeout)

    async def attach(self, terminal_id: str, *, cols: Optional[int] = None, rows: Optional[int] = None, timeout: Optional[float] = None) -> AsyncTerminal:
        """Re-attaches to a running terminal (resizing it when ``cols`` and ``rows`` are
        given); its recent output (what the server keeps of its tail, 16 KiB by default) is read first. One that has ended raises
        :class:`ConflictError` (its record keeps its output: ``commands.get``)."""
        return await self._dial([("terminal", terminal_id)], cols, rows, timeout)

    async def _dial(self, q: List[Any], cols: Optional[int], rows: Optional[int], timeout: Optional[float]) -> AsyncTerminal:
        if cols and rows:
            q += [("cols", int(cols)), ("rows", int(rows))]
        url = _core.terminal_url(self._api.opts, self._id, q)
        t = self._api.opts.timeout if timeout is None else timeout
        conn = await _ws.AsyncConn.open(url, self._api.headers, t)
        try:
            op, payload = await conn.recv(t)
            m = _json.loads(payload) if op == _ws.TEXT else None
        except (_ws.Closed, TimeoutError, ValueError) as e:
            await conn.close()
            raise APIConnectionError(f"terminal: no started message ({e})", code="connection_error") from None
        if not isinstance(m, dict) or m.get("type") != "started":
            await conn.close()
            raise APIConnectionError("terminal: no started message", code="connection_error")
        return AsyncTerminal(conn, self._id, m)


class AsyncSandboxPorts:
    """The sandbox's ports, private unless shared through a signed URL."""

    def __init__(self, api: _API, sandbox_id: str) -> None:
        self._api = api
        self._id = sandbox_id

    async def url(self, port: int, expires_in_seconds: Optional[int] = None) -> Preview:
        """As :meth:`AsyncSandbox.preview_url`: a signed URL of ``port``, valid
        ``expires_in_seconds`` (default 3600, at most 7 days)."""
        body = {} if expires_in_seconds is None else {"expires_in_seconds": expires_in_seconds}
        return Preview(await self._api.json("POST", f"/v1/sandboxes/{self._id}/ports/{int(port)}/url", json=body))


class AsyncSandbox:
    """A handle on a long-lived sandbox: its files, its commands, run(), stop, pause, resume,
    snapshot, fork, delete.

    Used as a context manager it deletes the sandbox at the end of the block."""

    def __init__(self, api: _API, record: Mapping[str, Any]) -> None:
        self._api = api
        self.record = SandboxRecord(record)
        self.id: str = _core.sandbox_id_of(record)
        self.files = AsyncSandboxFiles(api, self.id)
        self.commands = AsyncSandboxCommands(api, self.id)
        self.code = AsyncSandboxCode(api, self.id)
        self.pty = AsyncSandboxPty(api, self.id)
        self.ports = AsyncSandboxPorts(api, self.id)

    def __repr__(self) -> str:
        return f"AsyncSandbox(id={self.id!r}, status={self.status!r})"

    @property
    def status(self) -> str:
        return self.record.status

    async def refresh(self) -> SandboxRecord:
        """Reads the sandbox's record again."""
        self.record = SandboxRecord(await self._api.json("GET", f"/v1/sandboxes/{self.id}"))
        return self.record

    async def run(
        self,
        code: Optional[str] = None,
        input: JSON = None,
        config: JSON = None,
        *,
        template: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        timeout_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        idempotency_key: Optional[str] = None,
        wait: bool = True,
    ) -> RunResult:
        """Calls run(input, config) of code (or of a template's code) in this sandbox, next to
        its files. Answers when the run ends (unless ``wait=False``)."""
        run = _core.run_body(code=code, input=input, config=config, template=template, base=None, language=None, env=env)
        body = _core.sandbox_run_body(run, timeout_ms=timeout_ms, wait_ms=wait_ms)
        resp = await self._api.request(
            "POST", f"/v1/sandboxes/{self.id}/run", json=body, idempotency_key=idempotency_key,
            timeout=_core.request_timeout(self._api.opts, wait_ms),
        )
        return await _finish_run(self._api, resp, wait)

    async def stop(self) -> SandboxRecord:
        """Ends the sandbox's processes; its disk stays."""
        self.record = SandboxRecord(await self._api.json("POST", f"/v1/sandboxes/{self.id}/stop") or self.record)
        return self.record

    async def pause(self) -> SandboxRecord:
        """Pauses the running sandbox (status ``paused``). On gvisor its processes and memory
        go to disk and its RAM is freed; on ns they are frozen in RAM. A command still running
        in it raises :class:`CommandsRunningError`; pausing a paused sandbox is no error."""
        self.record = SandboxRecord(await self._api.json("POST", f"/v1/sandboxes/{self.id}/pause") or self.record)
        return self.record

    async def resume(self) -> SandboxRecord:
        """Wakes a paused sandbox, its processes alive again where they were; or starts a
        stopped one again on the same workspace."""
        self.record = SandboxRecord(await self._api.json("POST", f"/v1/sandboxes/{self.id}/resume") or self.record)
        return self.record

    async def snapshot(self, metadata: Optional[Mapping[str, str]] = None, *, idempotency_key: Optional[str] = None) -> Snapshot:
        """Takes a memory snapshot (processes, memory and disk) of the running sandbox, which
        then runs on. Needs ``isolation="gvisor"``: on ns it raises :class:`NotSupportedError`.
        A retry under the same ``idempotency_key`` (one is made when none is given) answers the
        snapshot the first attempt took."""
        return Snapshot(
            await self._api.json("POST", f"/v1/sandboxes/{self.id}/snapshot", json=_core.snapshot_body(metadata), idempotency_key=idempotency_key)
        )

    async def fork(
        self,
        snapshot: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
        expires_in_seconds: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        *,
        idempotency_key: Optional[str] = None,
    ) -> "AsyncSandbox":
        """Starts a new sandbox from a snapshot of this one (``snp_…``; without one, a fresh
        snapshot of the running sandbox is taken first and kept) and answers its handle: it
        runs with this one's memory, processes and files as they were, and its isolation,
        limits and template. ``env`` is laid over this sandbox's; ``metadata`` replaces its."""
        body = _core.fork_body(snapshot=snapshot, metadata=metadata, expires_in_seconds=expires_in_seconds, env=env)
        return AsyncSandbox(
            self._api, await self._api.json("POST", f"/v1/sandboxes/{self.id}/fork", json=body, idempotency_key=idempotency_key)
        )

    async def preview_url(self, port: int, expires_in_seconds: Optional[int] = None) -> Preview:
        """A signed URL of ``port`` in the sandbox (a preview), valid ``expires_in_seconds``
        (default 3600, at most 7 days): a server listening there (127.0.0.1 or 0.0.0.0) answers
        it. Ports are private otherwise; anyone with the URL reaches the port until it expires."""
        body = {} if expires_in_seconds is None else {"expires_in_seconds": expires_in_seconds}
        return Preview(await self._api.json("POST", f"/v1/sandboxes/{self.id}/ports/{int(port)}/url", json=body))

    async def snapshots(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> Page[Snapshot]:
        """This sandbox's snapshots, newest first."""
        return page_of(
            Snapshot, await self._api.json("GET", f"/v1/sandboxes/{self.id}/snapshots", params={"limit": limit, "cursor": cursor})
        )

    async def delete(self) -> None:
        """Destroys the sandbox; its record is kept."""
        await self._api.request("DELETE", f"/v1/sandboxes/{self.id}")

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, et: Optional[Type[BaseException]], e: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        await _delete_at_end(self, e)


async def _delete_at_end(sb: AsyncSandbox, error: Optional[BaseException]) -> None:
    try:
        await sb.delete()
    except NotFoundError:
        pass  # deleted in the block already
    except LbbError as de:
        if error is None:
            raise
        if hasattr(error, "add_note"):
            error.add_note(f"deleting sandbox {sb.id} after the error failed too: {de}")


class _AsyncScoped:
    """What ``AsyncSandboxes.scoped`` answers without a function: ``async with`` it for a sandbox that lasts the block."""

    def __init__(self, sandboxes: "AsyncSandboxes", spec: Dict[str, Any]) -> None:
        self._sandboxes = sandboxes
        self._spec = spec
        self._sb: Optional[AsyncSandbox] = None

    async def __aenter__(self) -> AsyncSandbox:
        self._sb = await self._sandboxes.create(self._spec)
        return self._sb

    async def __aexit__(self, et: Optional[Type[BaseException]], e: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        if self._sb is not None:
            await _delete_at_end(self._sb, e)

    async def call(self, fn: Callable[[AsyncSandbox], Awaitable[T]]) -> T:
        async with self as sb:
            return await fn(sb)


class AsyncSandboxes:
    """Runs and sandboxes (``/v1/sandboxes``)."""

    def __init__(self, api: _API) -> None:
        self._api = api
        self.templates = AsyncTemplates(api)

    async def run(
        self,
        code: Optional[str] = None,
        input: JSON = None,
        config: JSON = None,
        *,
        template: Optional[str] = None,
        base: Optional[str] = None,
        language: Optional[str] = None,
        limits: Optional[Limits] = None,
        isolation: Optional[str] = None,
        egress: Optional[Mapping[str, Any]] = None,
        timeout_ms: Optional[int] = None,
        wait_ms: Optional[int] = None,
        env: Optional[Mapping[str, str]] = None,
        metadata: Optional[Mapping[str, str]] = None,
        origin: Optional[Mapping[str, str]] = None,
        idempotency_key: Optional[str] = None,
        wait: bool = True,
    ) -> RunResult:
        """Runs code (or a template) once in a new sandbox, destroyed when the run ends.

        ``code`` defines ``run(input, config)``; the answer has ``ok``, ``result``,
        ``command`` (the record's id), ``stdout`` and ``stderr``. A run that raises answers
        ``ok=False`` with the traceback in stderr; errors of the call itself raise
        :class:`LbbError`. The SDK sends a fresh Idempotency-Key (or ``idempotency_key``)
        and reuses it on its retries, so the code runs at most once. When the server answers
        before the run ends (past ``wait_ms``), it waits for the command unless ``wait=False``.
        ``origin`` (``workflow``, ``run``, ``step``) names the workflow step that made the call.
        ``isolation`` (``"ns"``, ``"gvisor"``) wins over the template's and the server default;
        ``egress`` (``{"mode": "none" | "allowlist" | "public", "allow": [...], "quota_bytes": n}``)
        likewise.
        """
        run = _core.run_body(
            code=code,
            input=input,
            config=config,
            template=template,
            base=base,
            language=language,
            env=env,
            isolation=isolation,
            egress=egress,
        )
        body = _core.one_call_body(run, limits=limits, timeout_ms=timeout_ms, wait_ms=wait_ms, metadata=metadata, origin=origin)
        resp = await self._api.request(
            "POST", "/v1/sandboxes", json=body, idempotency_key=idempotency_key, timeout=_core.request_timeout(self._api.opts, wait_ms)
        )
        return await _finish_run(self._api, resp, wait)

    async def run_code(
        self,
        code: str,
        *,
        language: str = "python",
        timeout_ms: Optional[int] = None,
        limits: Optional[Limits] = None,
        isolation: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        idempotency_key: Optional[str] = None,
    ) -> RunResult:
        """Runs ``code`` as a plain program once (``python3 -c``, ``node -e``, ``bash -c``) in a
        new sandbox that ends with it, like seed 003's ``runCode``: ``exit_code``, ``stdout``,
        ``stderr`` and ``duration_ms`` say how it went. A non-zero exit is an answer, not an
        exception."""
        run = _core.run_body(code=None, script=code, input=None, config=None, template=None, base=None, language=language, env=env, isolation=isolation)
        body = _core.one_call_body(run, limits=limits, timeout_ms=timeout_ms, wait_ms=None, metadata=None, origin=None)
        resp = await self._api.request("POST", "/v1/sandboxes", json=body, idempotency_key=idempotency_key, timeout=_core.request_timeout(self._api.opts, None))
        return await _finish_run(self._api, resp, True)

    async def create(self, spec: Optional[Mapping[str, Any]] = None, /, *, idempotency_key: Optional[str] = None, **kwargs: Any) -> AsyncSandbox:
        """Creates a long-lived sandbox: ``create({"expires_in_seconds": 600})`` or
        ``create(template=…, base=…, limits=…, isolation=…, expires_in_seconds=…, env=…, metadata=…, origin=…)``.
        ``session="…"`` names it: the first create makes it, later ones answer it running, or
        resume it when stopped or paused (its workspace restored, also where its host's copy
        is gone). ``size="standard-1"`` … ``"standard-5"`` (or ``"small"``, ``"standard"``,
        ``"large"``) presets its limits; ``limits`` override it field by field.
        ``isolation="gvisor"`` gives it pause with memory, snapshots and forks. ``egress={"mode":
        "allowlist", "allow": ["pkgs.example.org", "*.cdn.example.org"]}`` its route out;
        ``api={"scopes": ["sandboxes:read"]}`` lets code inside call the API at ``$LBB_URL``
        with a key the host attaches (none enters the sandbox); ``git={"url": …}`` clones a
        public repository into /workspace first."""
        body = _core.sandbox_spec(spec, kwargs)
        return AsyncSandbox(self._api, await self._api.json("POST", "/v1/sandboxes", json=body, idempotency_key=idempotency_key))

    async def get(self, sandbox_id: str) -> AsyncSandbox:
        """A handle on an existing sandbox, with its record."""
        return AsyncSandbox(self._api, await self._api.json("GET", f"/v1/sandboxes/{sandbox_id}"))

    async def list(
        self,
        *,
        status: Optional[str] = None,
        label: Union[None, str, Sequence[str], Mapping[str, str]] = None,
        limit: Optional[int] = None,
        cursor: Optional[str] = None,
        session: Optional[str] = None,
    ) -> Page[SandboxRecord]:
        """The sandboxes of the graph; ``label`` (``{"team": "a"}`` or ``"team=a"``) keeps those
        whose metadata has every key=value given, ``session`` those of one session."""
        params = {"status": status, "label": _core.label_params(label), "limit": limit, "cursor": cursor, "session": session}
        return page_of(SandboxRecord, await self._api.json("GET", "/v1/sandboxes", params=params))

    async def delete(self, sandbox_id: str) -> None:
        await self._api.request("DELETE", f"/v1/sandboxes/{sandbox_id}")

    @overload
    def scoped(self, spec: Optional[Mapping[str, Any]] = None, /, **kwargs: Any) -> _AsyncScoped: ...

    @overload
    def scoped(self, spec: Optional[Mapping[str, Any]], fn: Callable[[AsyncSandbox], Awaitable[T]], /, **kwargs: Any) -> Awaitable[T]: ...

    def scoped(self, spec: Optional[Mapping[str, Any]] = None, fn: Optional[Callable[[AsyncSandbox], Awaitable[Any]]] = None, /, **kwargs: Any) -> Any:
        """A sandbox for the length of a block, deleted at its end, also after an error::

            async with lbb.sandboxes.scoped() as sb:
                await sb.files.write("data.csv", csv)

        or, as the TypeScript SDK has it, ``await lbb.sandboxes.scoped({}, fn)`` calls
        ``fn(sb)`` and answers what it returns.
        """
        scope = _AsyncScoped(self, _core.sandbox_spec(spec, kwargs))
        return scope if fn is None else scope.call(fn)


class AsyncSnapshots:
    """Memory snapshots of sandboxes, by id (``/v1/snapshots``); a sandbox lists its own with
    ``await sandbox.snapshots()``."""

    def __init__(self, api: _API) -> None:
        self._api = api

    async def list(self, sandbox_id: str, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> Page[Snapshot]:
        """The snapshots of a sandbox, newest first."""
        return page_of(
            Snapshot, await self._api.json("GET", f"/v1/sandboxes/{sandbox_id}/snapshots", params={"limit": limit, "cursor": cursor})
        )

    async def get(self, snapshot_id: str) -> Snapshot:
        return Snapshot(await self._api.json("GET", f"/v1/snapshots/{snapshot_id}"))

    async def delete(self, snapshot_id: str) -> Snapshot:
        """Deletes a snapshot and its bytes (forks made from it run on); answers the deleted snapshot."""
        return Snapshot(await self._api.json("DELETE", f"/v1/snapshots/{snapshot_id}"))


class AsyncFiles:
    """Files of the graph (``/v1/files``): content-addressed, outliving sandboxes."""

    def __init__(self, api: _API) -> None:
        self._api = api

    async def upload(self, data: Data, *, name: Optional[str] = None, idempotency_key: Optional[str] = None) -> File:
        return File(
            await self._api.json(
                "POST",
                "/v1/files",
                params={"name": name},
                content=_core.to_bytes(data),
                headers={"Content-Type": "application/octet-stream"},
                idempotency_key=idempotency_key,
            )
        )

    async def keep(self, sandbox_id: str, path: str, *, idempotency_key: Optional[str] = None) -> File:
        """Keeps a workspace file as a File; it names the sandbox and path as its origin."""
        return await AsyncSandboxFiles(self._api, sandbox_id).keep(path, idempotency_key=idempotency_key)

    async def list(self, *, limit: Optional[int] = None, cursor: Optional[str] = None) -> Page[File]:
        return page_of(File, await self._api.json("GET", "/v1/files", params={"limit": limit, "cursor": cursor}))

    async def get(self, file_id: str) -> File:
        return File(await self._api.json("GET", f"/v1/files/{file_id}"))

    async def content(self, file_id: str) -> bytes:
        return (await self._api.request("GET", f"/v1/files/{file_id}/content")).content

    async def delete(self, file_id: str) -> File:
        """Deletes a File; its bytes go with the last File, of any graph, that names them.
        Workspaces that imported it keep their copies. Raises FileInUseError while a template
        version names it."""
        return File(await self._api.json("DELETE", f"/v1/files/{file_id}"))


class AsyncLbbClient:
    """The asyncio client.

    ``base_url`` defaults to ``$LBB_URL``, then http://127.0.0.1:7700; ``api_key`` to
    ``$LBB_API_KEY``, then (for a local server) the admin key it saved; ``graph`` to
    ``$LBB_GRAPH``, then ``"main"``. Calls that fail to connect, or answer 429, 502, 503 or 504,
    are retried ``max_retries`` times with backoff, with the same Idempotency-Key.
    """

    def __init__(
        self,
        base_url: Optional[str] = None,
        *,
        api_key: Optional[str] = None,
        graph: Optional[str] = None,
        timeout: Optional[float] = None,
        max_retries: Optional[int] = None,
        headers: Optional[Mapping[str, str]] = None,
        http_client: Optional[httpx.AsyncClient] = None,
    ) -> None:
        self._api = _API(_core.resolve_options(base_url, api_key, graph, timeout, max_retries, headers), http_client)
        self.sandboxes = AsyncSandboxes(self._api)
        self.commands = AsyncCommands(self._api)
        self.files = AsyncFiles(self._api)
        self.snapshots = AsyncSnapshots(self._api)

    @property
    def base_url(self) -> str:
        return self._api.opts.base_url

    @property
    def graph(self) -> str:
        return self._api.opts.graph

    async def health(self) -> Record:
        """GET /healthz."""
        return Record(await self._api.json("GET", "/healthz", graph=False))

    async def quotas(self) -> Quotas:
        """The graph's quotas: usage and limits (``GET /v1/quotas``)."""
        return Quotas(await self._api.json("GET", "/v1/quotas"))

    async def mint_grant(
        self,
        *,
        workflow: Optional[str] = None,
        run: Optional[str] = None,
        step: Optional[str] = None,
        attempt: Optional[str] = None,
        budget: Optional[Mapping[str, Any]] = None,
        ttl_seconds: Optional[int] = None,
        scopes: Optional[Sequence[str]] = None,
    ) -> Record:
        """Mints a short-lived grant for one attempt of a workflow step (``POST /v1/grants``):
        its origin is stamped on every record made with it, its budget (``runs``, ``vcpu_ms``,
        ``gib_ms``) counts every run. ``token`` is answered this once; call with it through
        ``with_api_key``."""
        origin = {k: v for k, v in {"workflow": workflow, "run": run, "step": step, "attempt": attempt}.items() if v is not None}
        body = {k: v for k, v in {"origin": origin or None, "budget": budget, "ttl_seconds": ttl_seconds, "scopes": list(scopes) if scopes is not None else None}.items() if v is not None}
        return Record(await self._api.json("POST", "/v1/grants", json=body))

    async def get_grant(self, grant_id: str) -> Record:
        """A grant's record: origin, budget, usage so far, expiry."""
        return Record(await self._api.json("GET", f"/v1/grants/{grant_id}"))

    async def revoke_grant(self, grant_id: str) -> Record:
        """Revokes a grant: its calls answer 401 grant_revoked from then on."""
        return Record(await self._api.json("DELETE", f"/v1/grants/{grant_id}"))

    async def put_budget(self, workflow: str, run: str, *, runs: Optional[int] = None, vcpu_ms: Optional[float] = None, gib_ms: Optional[float] = None) -> Record:
        """Sets the budget of one run of a workflow (``PUT /v1/budgets/{workflow}/{run}``)."""
        body = {k: v for k, v in {"runs": runs, "vcpu_ms": vcpu_ms, "gib_ms": gib_ms}.items() if v is not None}
        return Record(await self._api.json("PUT", f"/v1/budgets/{workflow}/{run}", json=body))

    async def get_budget(self, workflow: str, run: str) -> Record:
        """A workflow run's budget, what its runs used and what is left."""
        return Record(await self._api.json("GET", f"/v1/budgets/{workflow}/{run}"))

    async def usage(self, *, from_: Optional[str] = None, to: Optional[str] = None, group_by: Optional[str] = None) -> Record:
        """What the graph's ended runs and commands used (``GET /v1/usage``), grouped by
        ``key``, ``template``, ``workflow`` or ``day``."""
        return Record(await self._api.json("GET", "/v1/usage", params={"from": from_, "to": to, "group_by": group_by}))

    def with_api_key(self, api_key: str) -> "AsyncLbbClient":
        """A client like this one that calls with another key, or a grant's token."""
        o = self._api.opts
        return AsyncLbbClient(o.base_url, api_key=api_key, graph=o.graph, timeout=o.timeout, max_retries=o.max_retries, headers=o.headers)

    async def openapi(self) -> Dict[str, Any]:
        """The server's OpenAPI document."""
        return dict(await self._api.json("GET", "/v1/openapi.json", graph=False))

    async def aclose(self) -> None:
        await self._api.aclose()

    close = aclose  # async only

    async def __aenter__(self) -> "AsyncLbbClient":
        return self

    async def __aexit__(self, et: Optional[Type[BaseException]], e: Optional[BaseException], tb: Optional[TracebackType]) -> None:
        await self.aclose()
