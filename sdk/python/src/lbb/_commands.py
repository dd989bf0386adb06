"""The events of a command started with its output streamed (``POST …/commands`` with
``stream``), read the same way by the sync and the async client."""

from __future__ import annotations

import base64
from typing import Dict, Optional, Tuple

from ._errors import APIConnectionError, LbbError, OutputLostError
from ._models import Command, Output
from ._sse import ServerSentEvent

STREAMS = ("stdout", "stderr")


class CommandStream:
    """Takes the events of one streamed command: its record (``command``), its chunks of
    stdout and stderr in the order the process wrote them, its end (``exit``). It counts the
    bytes that did not come (a gap in the offsets, or fewer bytes than the record says) and
    keeps up to ``output_limit`` bytes of each stream for the result."""

    def __init__(self, output_limit: Optional[int]) -> None:
        self.command: Optional[Command] = None
        self.exit: Optional[Command] = None
        self.lost = 0
        self._limit = output_limit
        self._next: Dict[str, int] = {s: 0 for s in STREAMS}
        self._kept: Dict[str, bytearray] = {s: bytearray() for s in STREAMS}
        self._cut: Dict[str, bool] = {s: False for s in STREAMS}

    def feed(self, ev: ServerSentEvent) -> Optional[Tuple[str, str]]:
        """Takes one event; for a chunk of output answers its stream and its text."""
        if ev.event == "command":
            self.command = Command(ev.json())
        elif ev.event in STREAMS:
            c = ev.json()
            stream = str(c.get("stream") or ev.event)
            text = str(c.get("data") or "")
            raw = base64.b64decode(c["base64"]) if c.get("base64") else text.encode("utf-8")
            self._advance(stream, int(c.get("offset") or 0))
            self._next[stream] += len(raw)
            if self._limit is not None:
                room = max(0, self._limit - len(self._kept[stream]))
                self._kept[stream] += raw[:room]
                self._cut[stream] = self._cut[stream] or len(raw) > room
            return stream, text
        elif ev.event == "exit":
            self.exit = Command(ev.json())
            for stream in STREAMS:
                out = self.exit.get(stream) or {}
                if not out.get("expired"):
                    self._advance(stream, int(out.get("bytes") or 0))
        elif ev.event == "error":
            err = (ev.json() or {}).get("error") or {}
            raise LbbError(str(err.get("message") or ev.data), code=str(err.get("code") or "error"), request_id=err.get("request_id"))
        return None

    def _advance(self, stream: str, offset: int) -> None:
        if offset > self._next[stream]:
            self.lost += offset - self._next[stream]
            self._next[stream] = offset

    def result(self) -> Command:
        """The command's record once it ended, its ``stdout.text`` and ``stderr.text`` the
        streams as they came (up to ``output_limit`` bytes) when it was set. Raises
        :class:`OutputLostError` when bytes did not come."""
        if self.exit is None:
            raise APIConnectionError("the output stream ended before the command did", code="connection_error")
        cmd = self.exit
        if self._limit is not None:
            for stream in STREAMS:
                out = cmd.get(stream)
                if not isinstance(out, Output):
                    out = Output(out or {})
                    cmd[stream] = out
                out.collected(bytes(self._kept[stream]), self._cut[stream])
        if self.lost:
            raise OutputLostError(
                f"{self.lost} bytes of the output of {cmd.id} did not come: what came is incomplete", command=cmd, lost_bytes=self.lost
            )
        return cmd
