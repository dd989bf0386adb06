"""commands.run against a real `lbb serve`, on both drivers: a shell line or argv, every chunk
to on_stdout/on_stderr as it comes, none lost however slow the callback (the process waits
for it), the whole output in the answer up to output_limit. The gvisor cases skip, saying
why, when runsc is missing."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from typing import Iterator, List

import httpx
import pytest

from conftest import Server
from lbb import AsyncLbbClient, LbbClient, Sandbox

RUNSC = "/usr/local/lib/lbb/runsc"
SEQ = 3_000_000

isolations = [
    "ns",
    pytest.param("gvisor", marks=pytest.mark.skipif(not os.path.exists(RUNSC), reason=f"RequiresGvisor: {RUNSC} is missing")),
]


@pytest.fixture(scope="module")
def want() -> bytes:
    return subprocess.run(["seq", "1", str(SEQ)], check=True, capture_output=True).stdout


@pytest.fixture(params=isolations)
def sandbox(request: pytest.FixtureRequest, lbb: LbbClient) -> Iterator[Sandbox]:
    sb = lbb.sandboxes.create(isolation=request.param, expires_in_seconds=600)
    try:
        yield sb
    finally:
        sb.delete()


def test_a_shell_line_and_argv(sandbox: Sandbox) -> None:
    sandbox.files.write("a.txt", "1\n2\n")
    cmd = sandbox.commands.run("ls -l | wc -l")
    assert cmd.status == "succeeded" and cmd.stdout.text == "2\n", cmd  # "total …" and a.txt
    assert cmd.argv == ["bash", "-lc", "ls -l | wc -l"]
    cmd = sandbox.commands.run(["cat", "a.txt"], output_limit=1 << 20)
    assert cmd.stdout.text == "1\n2\n" and not cmd.stdout.truncated
    failed = sandbox.commands.run("echo oops >&2; exit 3", output_limit=1 << 20)
    assert failed.status == "failed" and failed.exit_code == 3 and failed.stderr.text == "oops\n"


def test_seq_whole_through_the_callbacks(sandbox: Sandbox, want: bytes) -> None:
    chunks: List[str] = []
    errs: List[str] = []
    cmd = sandbox.commands.run(f"seq 1 {SEQ}; echo done >&2", on_stdout=chunks.append, on_stderr=errs.append, output_limit=1 << 20, timeout_ms=300_000)
    assert cmd.status == "succeeded", cmd
    got = "".join(chunks).encode()
    assert len(got) == len(want) and got == want
    assert "".join(errs) == "done\n"
    # The answer keeps the first MiB, and says it is cut; the record says what it dropped.
    assert cmd.stdout.data == want[: 1 << 20] and cmd.stdout.truncated
    assert cmd.stdout.bytes == len(want) and cmd.stdout["truncated"] is True and cmd.stdout.dropped_bytes > 0


def test_seq_whole_to_a_slow_callback(sandbox: Sandbox, want: bytes) -> None:
    chunks: List[str] = []

    def slow(text: str) -> None:
        chunks.append(text)
        time.sleep(0.002)

    start = time.monotonic()
    cmd = sandbox.commands.run(["seq", "1", str(SEQ)], on_stdout=slow, timeout_ms=300_000)
    assert cmd.status == "succeeded", cmd
    assert "".join(chunks).encode() == want
    # The process waited for the reader: it ran about as long as the reading took.
    assert cmd.duration_ms >= 0.5 * len(chunks) * 2, (cmd.duration_ms, len(chunks), time.monotonic() - start)


def test_seq_whole_async(server: Server, want: bytes) -> None:
    url, key = server.url, server.key

    async def main() -> bytes:
        got = bytearray()

        async def on_stdout(text: str) -> None:
            got.extend(text.encode())
            await asyncio.sleep(0)

        async with AsyncLbbClient(url, api_key=key) as c:
            async with c.sandboxes.scoped(expires_in_seconds=600) as sb:
                cmd = await sb.commands.run(f"seq 1 {SEQ}", on_stdout=on_stdout, timeout_ms=300_000)
                assert cmd.status == "succeeded", cmd
        return bytes(got)

    assert asyncio.run(main()) == want


def test_preview_url(sandbox: Sandbox) -> None:
    """A server in the sandbox answers its signed preview URL; a tampered one is 404."""
    sandbox.files.write("www/index.html", "<p>hello preview</p>")
    sandbox.commands.run("cd www && (python3 -m http.server 8000 >/dev/null 2>&1 &)")
    p = sandbox.preview_url(8000, expires_in_seconds=120)
    assert p.port == 8000 and p.sandbox == sandbox.id and ".preview.localhost:" in p.url
    port = p.url.rsplit(":", 1)[1].strip("/")
    # *.localhost is the machine itself (as browsers and curl resolve it).
    transport = httpx.HTTPTransport(local_address="127.0.0.1")
    with httpx.Client(transport=transport, timeout=10) as http:

        def get(url: str) -> httpx.Response:
            host = url.split("//", 1)[1].split("/", 1)[0]
            return http.get(f"http://127.0.0.1:{port}/", headers={"Host": host})

        deadline = time.monotonic() + 30
        while True:
            r = get(p.url)
            if r.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert r.status_code == 200 and "hello preview" in r.text, r
        label = p.url.split("//", 1)[1].split(".", 1)[0]
        tampered = p.url.replace(label, label[:-1] + ("a" if label[-1] != "a" else "b"))
        assert get(tampered).status_code == 404
