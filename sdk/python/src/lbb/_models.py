"""Records of the API as Python values.

Every record is a ``dict`` of the JSON the server sent, so ``run["result"]`` and
``cmd["stdout"]["tail"]`` work as in the seed's samples, and ``json.dumps`` of one gives the
wire form back. Each also reads its fields as typed attributes (``run.result``,
``cmd.stdout.tail``); fields this SDK does not know yet are still there as keys and attributes.
"""

from __future__ import annotations

from typing import Any, ClassVar, Dict, Iterable, List, Mapping, Optional, Type, TypeVar

R = TypeVar("R", bound="Record")

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


class Output(Record):
    """What a record keeps of one output stream: its head, its tail and its size in bytes."""

    @property
    def head(self) -> str:
        return str(self.get("head", ""))

    @property
    def tail(self) -> str:
        return str(self.get("tail", ""))

    @property
    def bytes(self) -> int:
        return int(self.get("bytes", 0))

    @property
    def truncated(self) -> bool:
        """True when the record kept only part of the stream (its head and its tail)."""
        return self._whole() is None

    @property
    def text(self) -> str:
        """The whole stream when the record kept all of it, else head and tail joined by an ellipsis."""
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


class RunResult(Record):
    """The answer of a run: one-call (``sandboxes.run``) or in a sandbox (``sandbox.run``)."""

    _nested = {"stdout": Output, "stderr": Output}

    @property
    def ok(self) -> bool:
        """True when run() returned and the process exited with code 0."""
        return bool(self.get("ok", False))

    @property
    def result(self) -> Any:
        """What run(input, config) returned, as JSON values."""
        return self.get("result")

    @property
    def command(self) -> str:
        """The id (``cmd_…``) of the command record of this run."""
        return str(self.get("command") or self.get("id") or "")

    @property
    def sandbox(self) -> str:
        return str(self.get("sandbox", ""))

    @property
    def isolation(self) -> str:
        """The isolation the run ran on (``"ns"``, ``"gvisor"``); ``""`` from a server before it."""
        return str(self.get("isolation") or "")

    @property
    def status(self) -> str:
        return str(self.get("status", ""))

    @property
    def exit_code(self) -> Optional[int]:
        return self.get("exit_code")

    @property
    def duration_ms(self) -> int:
        return int(self.get("duration_ms") or 0)

    @property
    def error(self) -> Optional[str]:
        return self.get("error")

    @property
    def stdout(self) -> Output:
        v = self.get("stdout")
        return v if isinstance(v, Output) else Output(v or {})

    @property
    def stderr(self) -> Output:
        v = self.get("stderr")
        return v if isinstance(v, Output) else Output(v or {})

    @property
    def done(self) -> bool:
        return self.status in DONE_STATUSES


class Command(Record):
    """A command record: a process or a run() in a sandbox, with its status and output."""

    _nested = {"stdout": Output, "stderr": Output}

    @property
    def id(self) -> str:
        return str(self.get("id") or self.get("command") or "")

    @property
    def sandbox(self) -> str:
        return str(self.get("sandbox", ""))

    @property
    def kind(self) -> str:
        return str(self.get("kind", ""))

    @property
    def status(self) -> str:
        return str(self.get("status", ""))

    @property
    def ok(self) -> bool:
        return bool(self.get("ok", False))

    @property
    def exit_code(self) -> Optional[int]:
        return self.get("exit_code")

    @property
    def result(self) -> Any:
        return self.get("result")

    @property
    def duration_ms(self) -> int:
        return int(self.get("duration_ms") or 0)

    @property
    def stdout(self) -> Output:
        v = self.get("stdout")
        return v if isinstance(v, Output) else Output(v or {})

    @property
    def stderr(self) -> Output:
        v = self.get("stderr")
        return v if isinstance(v, Output) else Output(v or {})

    @property
    def done(self) -> bool:
        return self.status in DONE_STATUSES


class ForkedFrom(Record):
    """The sandbox and snapshot a fork started from."""

    @property
    def sandbox(self) -> str:
        return str(self.get("sandbox", ""))

    @property
    def snapshot(self) -> str:
        return str(self.get("snapshot", ""))


class SandboxRecord(Record):
    """A sandbox record: status, base or template version, isolation, limits, times and usage."""

    _nested = {"forked_from": ForkedFrom}

    @property
    def id(self) -> str:
        return str(self.get("id") or self.get("sandbox") or "")

    @property
    def status(self) -> str:
        return str(self.get("status", ""))

    @property
    def isolation(self) -> str:
        """The isolation it runs on (``"ns"``, ``"gvisor"``); ``""`` from a server before it."""
        return str(self.get("isolation") or "")

    @property
    def paused_at(self) -> Optional[str]:
        """When it was paused (RFC 3339), only while it is."""
        return self.get("paused_at") or None

    @property
    def forked_from(self) -> Optional[ForkedFrom]:
        """The sandbox and snapshot it was forked from; ``None`` unless it is a fork."""
        v = self.get("forked_from")
        return v if isinstance(v, ForkedFrom) else None


class Snapshot(Record):
    """A memory snapshot of a running sandbox (``snp_…``): its processes and memory with its
    disk. Forks start from one; it goes with its sandbox."""

    @property
    def id(self) -> str:
        return str(self.get("id", ""))

    @property
    def sandbox(self) -> str:
        return str(self.get("sandbox", ""))

    @property
    def isolation(self) -> str:
        return str(self.get("isolation", ""))

    @property
    def memory(self) -> bool:
        """True when it holds processes and memory, not only the disk."""
        return bool(self.get("memory", False))

    @property
    def size_bytes(self) -> int:
        return int(self.get("size_bytes") or 0)

    @property
    def created_at(self) -> str:
        return str(self.get("created_at", ""))

    @property
    def duration_ms(self) -> float:
        """How long taking it held the sandbox."""
        return float(self.get("duration_ms") or 0)

    @property
    def metadata(self) -> Dict[str, str]:
        return dict(self.get("metadata") or {})


class Template(Record):
    """One version of a template (``GET`` adds ``versions``, the list of all of them)."""

    @property
    def id(self) -> str:
        return str(self.get("id", ""))

    @property
    def name(self) -> str:
        return str(self.get("name", ""))

    @property
    def version(self) -> int:
        return int(self.get("version") or 0)

    @property
    def isolation(self) -> str:
        """The isolation its runs and sandboxes default to; ``""``: the server default."""
        return str(self.get("isolation") or "")


class FileInfo(Record):
    """An entry of a workspace directory listing."""

    @property
    def path(self) -> str:
        return str(self.get("path") or self.get("name") or "")

    @property
    def type(self) -> str:
        return str(self.get("type", ""))

    @property
    def size(self) -> int:
        return int(self.get("size") or 0)


class File(Record):
    """A File of the graph: content-addressed, outlives sandboxes, names its origin."""

    @property
    def id(self) -> str:
        return str(self.get("id", ""))

    @property
    def sha256(self) -> str:
        return str(self.get("sha256", ""))


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
