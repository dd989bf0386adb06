"""Server-sent events: the output streams of commands (GET /v1/commands/{id}/output)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, List, Optional


@dataclass(frozen=True)
class ServerSentEvent:
    """One event of a stream.

    ``event`` is its type (``"message"`` when the server names none); ``data`` its text, lines
    joined by newlines; ``id`` the last event id seen, which a reconnect sends back as
    Last-Event-ID so that the server resumes after it.
    """

    event: str
    data: str
    id: Optional[str] = None
    retry: Optional[int] = None

    def json(self) -> Any:
        """The data parsed as JSON."""
        return json.loads(self.data)

    @property
    def text(self) -> str:
        """The output text an event carries: ``data`` itself, or its ``data``/``text``/``chunk``
        field when the data is a JSON object."""
        d = self.data
        if d.startswith("{"):
            try:
                v = json.loads(d)
            except ValueError:
                return d
            if isinstance(v, dict):
                for k in ("data", "text", "chunk"):
                    if isinstance(v.get(k), str):
                        return str(v[k])
        return d


class LineSplitter:
    """Splits a byte stream into lines (without their ends). It looks for line ends only in the
    bytes just fed, so a long line that comes in many pieces costs its length once (httpx's
    iter_lines rescans what it holds on every piece: quadratic in a 64 KiB output event)."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, chunk: bytes) -> List[str]:
        """Takes bytes; answers the lines they complete."""
        self._buf += chunk
        if b"\n" not in chunk:
            return []
        *lines, rest = self._buf.split(b"\n")
        self._buf = bytearray(rest)
        return [line.decode("utf-8", "replace").rstrip("\r") for line in lines]

    def flush(self) -> List[str]:
        """The last line, when the stream did not end with a line end."""
        rest, self._buf = self._buf, bytearray()
        return [rest.decode("utf-8", "replace").rstrip("\r")] if rest else []


class SSEDecoder:
    """Turns the lines of a text/event-stream into events (the WHATWG parsing rules)."""

    def __init__(self) -> None:
        self._event = ""
        self._data: List[str] = []
        self._id: Optional[str] = None
        self._retry: Optional[int] = None
        self.last_id: Optional[str] = None

    def feed(self, line: str) -> Optional[ServerSentEvent]:
        """Takes one line (without its end); returns an event when the line ends one."""
        line = line.rstrip("\r\n")
        if line == "":
            if not self._data and not self._event:
                return None
            ev = ServerSentEvent(self._event or "message", "\n".join(self._data), self._id, self._retry)
            self._event, self._data, self._retry = "", [], None
            return ev
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        elif field == "id":
            if "\0" not in value:
                self._id = value
                self.last_id = value
        elif field == "retry":
            if value.isdigit():
                self._retry = int(value)
        return None

    def flush(self) -> Optional[ServerSentEvent]:
        """Ends the stream: an event whose blank line never came is dropped, per the spec."""
        self._event, self._data = "", []
        return None
