"""Terminals against a real `lbb serve`: a login shell on a real pty over the WebSocket,
driven with the sync and the async client (resize and `stty size`, `cd` kept across lines,
re-attach after a dropped connection sees the recent output, Ctrl-C, the exit code, a burst
of output), and `ports.url`."""

from __future__ import annotations

import asyncio
import time

import pytest
from conftest import Server
from lbb import AsyncLbbClient, AsyncTerminal, ConflictError, LbbClient, Terminal


def expect(term: Terminal, want: str, timeout: float = 30.0) -> str:
    """Reads the terminal's output until ``want`` is in it; answers what came."""
    out = b""
    deadline = time.monotonic() + timeout
    while want.encode() not in out:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"no {want!r} in the terminal's output: {out[-2000:]!r}")
        try:
            chunk = term.read(timeout=left)
        except TimeoutError:
            continue
        if chunk is None:
            raise AssertionError(f"the terminal ended before {want!r}: {out[-2000:]!r}")
        out += chunk
    return out.decode("utf-8", "replace")


def test_terminal_shell(lbb: LbbClient) -> None:
    with lbb.sandboxes.create(expires_in_seconds=600) as sb:
        term = sb.pty.create(cols=80, rows=24, env={"GREETING": "hello"})
        assert term.id.startswith("cmd_") and term.exit_code is None
        term.resize(100, 30)
        # $((…)) keeps the marker out of the typed line the terminal echoes.
        term.send("stty size; echo size$((1+1))\n")
        assert "30 100" in expect(term, "size2")
        term.send("cd /tmp\n")
        # The server masks env values in output; their length shows they arrived.
        term.send("pwd; echo len${#GREETING}-$((2+2))\n")
        assert "/tmp" in expect(term, "len5-4")

        # The connection drops (no closing handshake); re-attach by id sees the recent output
        # first, and the shell's state.
        term._conn.sock.close()
        again = sb.pty.attach(term.id, cols=90, rows=20)
        assert again.id == term.id
        assert "len5-4" in expect(again, "len5-4")
        again.send("stty size; pwd; echo re$((3+3))\n")
        out = expect(again, "re6")
        assert "20 90" in out and "/tmp" in out

        # Ctrl-C interrupts a foreground sleep; `exit 7` ends the shell with 7.
        again.send("sleep 60\n")
        time.sleep(0.5)
        again.send("\x03")
        again.send("echo int$((4+4))\n")
        expect(again, "int8", timeout=15)
        again.send("exit 7\n")
        seen: list = []
        assert again.wait(seen.append, timeout=30) == 7
        assert again.exit is not None and again.exit["status"] in ("exited", "failed")
        assert again.read() is None
        again.close()
        with pytest.raises(ConflictError):
            sb.pty.attach(term.id)
        rec = sb.commands.get(term.id)
        assert rec["kind"] == "terminal" and rec["exit_code"] == 7

        p = sb.ports.url(8000, expires_in_seconds=60)
        assert p.port == 8000 and p.url.startswith("http")


def test_terminal_async(server: Server) -> None:
    async def main() -> None:
        async with AsyncLbbClient(server.url, api_key=server.key, graph="main") as c:
            async with await c.sandboxes.create(expires_in_seconds=600) as sb:
                term: AsyncTerminal = await sb.pty.create(argv=["sh", "-c", "cd /etc && pwd && stty size && exit 3"], cols=50, rows=10)
                out = b""
                async for chunk in term:
                    out += chunk
                assert b"/etc" in out and b"10 50" in out
                assert term.exit_code == 3
                await term.close()

                # A burst of output arrives whole and in order: 23 KB, within the 32 KB (head
                # and tail) the server keeps of a terminal for a reader that lags; past that it
                # skips ahead.
                flood = await sb.pty.create(argv=["sh", "-c", "seq 1 4000"])
                got = bytearray()
                assert await flood.wait(got.extend, timeout=60) == 0
                lines = bytes(got).split(b"\r\n")
                assert lines == [str(i).encode() for i in range(1, 4001)] + [b""], (len(lines), lines[-3:])
                await flood.close()

    asyncio.run(main())
