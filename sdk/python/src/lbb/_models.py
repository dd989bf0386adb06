"""Records of the API as Python values.

Every record is a ``dict`` of the JSON the server sent, so ``run["result"]`` and
``cmd["stdout"]["tail"]`` work as in the seed's samples, and ``json.dumps`` of one gives the
wire form back. Each also reads its fields as typed attributes (``run.result``,
``cmd.stdout.tail``); fields this SDK does not know yet are still there as keys and attributes.
"""

from __future__ import annotations

import builtins
from typing import Any, Callable, ClassVar, Dict, Generic, Iterable, List, Mapping, Optional, Tuple, Type, TypeVar, overload

builtins_bytes = builtins.bytes  # Output has a field named bytes

R = TypeVar("R", bound="Record")
T = TypeVar("T")

# Command statuses that are final.
DONE_STATUSES = frozenset({"succeeded", "failed", "timed_out", "killed", "lost", "oom", "disk_full"})


class Record(Dict[str, Any]):
    """A JSON object of the API, read as keys or as attributes."""

    # Nested fields that are records of a known kind.
    _nested: ClassVar[Mapping[str, "Type[Record]"]] = {}

    def __init__(self, data: Optional[Mapping[str, Any]] = None, **kwargs: Any) -> None:
        super().__init__()
        merged = dict(data or {}, **kwargs)
        for k, v in merged.items():
            cls = self._nested.get(k)
            if cls is not None and isinstance(v, Mapping):
                self[k] = cls(v)
            else:
                self[k] = _wrap(v)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}") from None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({dict.__repr__(self)})"


def _wrap(v: Any) -> Any:
    if isinstance(v, Record):
        return v
    if isinstance(v, Mapping):
        return Record(v)
    if isinstance(v, list):
        return [_wrap(x) for x in v]
    return v


class _Field(Generic[T]):
    """A typed attribute of a record: its key's value, or an alias's when the key's is null or
    ``""``, read through ``convert`` (which also makes the value of a missing field, from ``None``)."""

    def __init__(self, convert: Callable[[Any], T], *aliases: str, doc: Optional[str] = None) -> None:
        self.convert = convert
        self.aliases = aliases
        self.__doc__ = doc
        self.keys: Tuple[str, ...] = aliases

    def __set_name__(self, owner: type, name: str) -> None:
        self.keys = (name, *self.aliases)

    @overload
    def __get__(self, rec: None, owner: type) -> "_Field[T]": ...

    @overload
    def __get__(self, rec: Record, owner: type) -> T: ...

    def __get__(self, rec: Optional[Record], owner: type) -> Any:
        if rec is None:
            return self
        v = None
        for k in self.keys:
            v = rec.get(k)
            if v is not None and v != "":
                break
        return self.convert(v)


def _str(*aliases: str, doc: Optional[str] = None) -> _Field[str]:
    return _Field(lambda v: "" if v is None else str(v), *aliases, doc=doc)


def _int(doc: Optional[str] = None) -> _Field[int]:
    return _Field(lambda v: int(v or 0), doc=doc)


def _bool(doc: Optional[str] = None) -> _Field[bool]:
    return _Field(bool, doc=doc)


def _raw(doc: Optional[str] = None) -> _Field[Any]:
    """A field read as its JSON value; ``None`` when missing."""
    return _Field(lambda v: v, doc=doc)


def _of(cls: Type[R], doc: Optional[str] = None) -> _Field[Optional[R]]:
    """A nested record; ``None`` when missing."""
    return _Field(lambda v: v if isinstance(v, cls) else None, doc=doc)


def _output() -> _Field["Output"]:
    return _Field(lambda v: v if isinstance(v, Output) else Output(v or {}))


class Output(Record):
    """What a record keeps of one output stream: its head, its tail and its size in bytes.
    Head and tail never repeat a byte (a stream that fits the tail is all in the tail).

    Of a command run with ``output_limit`` it also holds the stream as it came: ``text`` is
    then that, and ``truncated`` says the limit cut it."""

    head = _str()
    tail = _str()
    bytes = _int()
    dropped_bytes = _int("How many bytes of the stream head and tail do not hold.")

    _collected: "Optional[builtins_bytes]" = None
    _collected_cut = False

    def collected(self, data: "builtins_bytes", cut: bool) -> None:
        """Sets the stream as it came (up to a limit; ``cut`` says the limit cut it)."""
        self._collected, self._collected_cut = data, cut

    @property
    def data(self) -> "Optional[builtins_bytes]":
        """The stream's bytes as they came, for a command run with ``output_limit``; else None."""
        return self._collected

    @property
    def truncated(self) -> bool:
        """True when ``text`` is not the whole stream: the record kept only its head and tail
        (or, with ``output_limit``, the limit cut it)."""
        if self._collected is not None:
            return self._collected_cut
        if "truncated" in self:
            return bool(self["truncated"])
        return self._whole() is None

    @property
    def text(self) -> str:
        """The whole stream when it is here (kept by the record, or collected with
        ``output_limit``), else what is here: head and tail joined by an ellipsis, or the
        first ``output_limit`` bytes."""
        if self._collected is not None:
            return self._collected.decode("utf-8", "replace")
        whole = self._whole()
        return whole if whole is not None else self.head + "\n…\n" + self.tail

    def _whole(self) -> Optional[str]:
        h, t, n = self.head, self.tail, self.bytes
        hb, tb = len(h.encode()), len(t.encode())
        if n <= hb:
            return h
        if n <= tb:
            return t
        if hb + tb == n:  # head and tail are adjacent pieces
            return h + t
        return None


class _Process(Record):
    """What a run's answer and a command record share: status, exit, output."""

    _nested = {"stdout": Output, "stderr": Output}

    sandbox = _str()
    status = _str()
    ok = _bool("True when the process exited with code 0 (for a run: when run() returned).")
    exit_code: _Field[Optional[int]] = _raw()
    result = _raw("What run(input, config) returned, as JSON values (``None`` when result_truncated).")
    result_truncated = _bool(
        "True when the result was larger than the server keeps in a record: ``result_file`` is the File of the graph that holds it."
    )
    result_bytes = _int("With result_truncated: the result's size in bytes.")
    result_file = _str(doc="With result_truncated: the File (``fil_…``) that holds the result, ``\"\"`` when the graph's quota had no room.")
    duration_ms = _int()
    stdout = _output()
    stderr = _output()

    @property
    def done(self) -> bool:
        return self.status in DONE_STATUSES


class RunResult(_Process):
    """The answer of a run: one-call (``sandboxes.run``) or in a sandbox (``sandbox.run``)."""

    command = _str("id", doc="The id (``cmd_…``) of the command record of this run.")
    isolation = _str(doc='The isolation the run ran on (``"ns"``, ``"gvisor"``); ``""`` from a server before it.')
    error: _Field[Optional[str]] = _raw()


class CodeResult(Record):
    """How a cell of code went in a context (``sandbox.code.run``): ``stdout``, ``stderr``,
    ``results`` (bundles of MIME types: ``text/plain``, ``text/html``, ``image/png`` as
    base64, …), ``error`` (``name``, ``value``, ``traceback``) when it raised, ``command`` (its
    record), ``context``, ``execution_count`` and ``duration_ms``."""

    command = _str()
    context = _str()
    sandbox = _str()
    status = _str()
    stdout = _str()
    stderr = _str()
    duration_ms = _int()
    execution_count: _Field[Optional[int]] = _raw()
    results: _Field[Any] = _raw()
    error: _Field[Any] = _raw()
    context_restarted = _bool("The context's interpreter had ended (the sandbox was stopped): this cell started a fresh one.")

    @property
    def text(self) -> str:
        """The ``text/plain`` of the last result or display, ``""`` when there is none."""
        for out in reversed(self.get("results") or []):
            t = (out.get("data") or {}).get("text/plain")
            if isinstance(t, str):
                return t
        return ""


class Command(_Process):
    """A command record: a process or a run() in a sandbox, with its status and output."""

    id = _str("command")
    kind = _str()
    forked_from = _str(doc="For a fork's copy of a command that ran in its source: the source command's id.")


class ForkedFrom(Record):
    """The sandbox and snapshot a fork started from."""

    sandbox = _str()
    snapshot = _str()


class WorkspaceArchive(Record):
    """A stopped sandbox's disk in the server's blob store, restored at resume where its
    host's copy is gone."""

    sha256 = _str()
    bytes = _int("The archive's size.")
    disk_bytes = _int("The size of the disk it holds.")
    archived_at = _str()


class SandboxRecord(Record):
    """A sandbox record: status, base or template version, isolation, limits, times and usage."""

    _nested = {"forked_from": ForkedFrom, "workspace": WorkspaceArchive}

    id = _str("sandbox")
    status = _str()
    isolation = _str(doc='The isolation it runs on (``"ns"``, ``"gvisor"``); ``""`` from a server before it.')
    paused_at: _Field[Optional[str]] = _Field(lambda v: v or None, doc="When it was paused (RFC 3339), only while it is.")
    pause_mode = _str(doc='How it is paused, only while it is: ``"checkpoint"`` (saved to disk, RAM freed) or ``"freeze"`` (parked in RAM, running commands included).')
    checkpoint_bytes = _int("The size of its checkpoint on disk while it is paused with one (gvisor).")
    forked_from = _of(ForkedFrom, "The sandbox and snapshot it was forked from; ``None`` unless it is a fork.")
    session = _str(doc="The caller's name for it (``create(session=…)``); ``\"\"`` when it has none.")
    size = _str(doc='The named size its limits came from (``"standard-1"`` … ``"standard-5"``); ``""`` when none.')
    workspace = _of(WorkspaceArchive, "Its disk archived to the server's blob store at its last stop; ``None`` unless it is stopped with one.")


class Snapshot(Record):
    """A memory snapshot of a running sandbox (``snp_…``): its processes and memory with its
    disk. Forks start from one; it goes with its sandbox."""

    id = _str()
    sandbox = _str()
    isolation = _str()
    memory = _bool("True when it holds processes and memory, not only the disk.")
    size_bytes = _int()
    created_at = _str()
    duration_ms = _Field(lambda v: float(v or 0), doc="How long taking it held the sandbox.")
    metadata = _Field(lambda v: dict(v or {}))


class Preview(Record):
    """A signed, expiring URL of a port of a sandbox: what listens there answers it, HTTP and
    WebSocket alike, in a browser or with curl, until ``expires_at``."""

    id = _str()
    url = _str()
    sandbox = _str()
    port = _int()
    expires_at = _str()
    created_at = _str()


class Template(Record):
    """One version of a template (``GET`` adds ``versions``, the list of all of them)."""

    id = _str()
    name = _str()
    version = _int()
    isolation = _str(doc='The isolation its runs and sandboxes default to; ``""``: the server default.')
    existing = _bool("In the answer of ``templates.create``: True when no new version was made, the newest already holding what was saved.")
    layer = _str(doc="The key of the image layer its recipe (``image``) builds; ``raw['build']`` is the build's state.")


class FileInfo(Record):
    """An entry of a workspace directory listing."""

    path = _str("name")
    type = _str()
    size = _int()


class File(Record):
    """A File of the graph: content-addressed, outlives sandboxes, names its origin."""

    id = _str()
    sha256 = _str()
    size = _int()
    name = _str()


class Quota(Record):
    """One quota of a graph: what it holds (``usage``) and the most it may (``limit``), a
    ``"count"`` or ``"bytes"`` (``unit``)."""

    usage = _int()
    limit = _int()
    unit = _str()


class Quotas(Record):
    """A graph's quotas by name (``quotas["files"].usage``) and the caps of one call."""

    graph = _str()
    quotas: _Field[Dict[str, Quota]] = _Field(
        lambda v: {k: x if isinstance(x, Quota) else Quota(x) for k, x in (v or {}).items()},
        doc="Each quota by name: running_sandboxes, sandboxes, stopped_sandboxes, stopped_disk_bytes, checkpoints, "
        "checkpoint_bytes, files, file_bytes, snapshots, snapshot_bytes.",
    )
    max_file_bytes = _int()
    max_result_bytes = _int()


class Page(List[R]):
    """One page of a list, with the cursor of the next (``None`` on the last page)."""

    def __init__(self, items: Iterable[R] = (), next_cursor: Optional[str] = None, raw: Optional[Mapping[str, Any]] = None) -> None:
        super().__init__(items)
        self.next_cursor = next_cursor or None
        self.raw: Record = Record(raw or {})


def page_of(cls: Type[R], body: Any) -> Page[R]:
    """Reads a list answer: ``{"data": [...], "next_cursor": ...}`` or a bare array."""
    if isinstance(body, list):
        return Page([cls(x) for x in body])
    if isinstance(body, Mapping):
        items = body.get("data")
        if items is None:
            items = body.get("entries") or body.get("files") or body.get("snapshots") or []
        return Page([cls(x) for x in items], body.get("next_cursor"), body)
    return Page([])


def run_from_command(prev: Mapping[str, Any], cmd: Mapping[str, Any]) -> RunResult:
    """The answer of a run that finished after a 202, from the 202's body and the command record."""
    merged: Dict[str, Any] = dict(prev)
    for k, v in cmd.items():
        if k in ("id", "graph", "kind", "code", "input", "config", "env_names", "idempotency_key", "origin"):
            continue
        merged[k] = v
    merged["command"] = cmd.get("id") or prev.get("command")
    merged.setdefault("result", None)
    if "result" not in cmd and cmd.get("status") in DONE_STATUSES:
        merged["result"] = None
    return RunResult(merged)
