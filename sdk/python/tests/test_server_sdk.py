"""The SDK against a real `lbb serve` with the real driver: Level 1, 2 and 3 beyond the seed's
samples, errors, idempotency and the async client. Written to DESIGN.md section 4; a test of a
route the server does not serve yet fails (it is not skipped)."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

import lbb as sdk
from lbb import LbbClient

SUM = "def run(input, config):\n    return sum(input)"


def key() -> str:
    return "test-" + uuid.uuid4().hex


# Level 1


def test_run_answer_has_the_documented_fields(lbb: LbbClient) -> None:
    run = lbb.sandboxes.run(code=SUM, input=[1, 2, 3])
    for field in ("ok", "result", "command", "sandbox", "status", "exit_code", "duration_ms", "stdout", "stderr"):
        assert field in run, field
    assert (run.ok, run.result, run.status, run.exit_code) == (True, 6, "succeeded", 0)
    assert run.command.startswith("cmd_") and run.sandbox.startswith("sbx_")
    assert set(run.stdout) >= {"head", "tail", "bytes"}
    # The sandbox of a one-call run is gone; its record is kept.
    assert lbb.sandboxes.get(run.sandbox).status == "destroyed"
    assert lbb.commands.get(run.command)["status"] == "succeeded"


def test_run_prints_and_config(lbb: LbbClient) -> None:
    code = "def run(input, config):\n    print('hello', input)\n    return {'unit': config['unit'], 'n': input}"
    run = lbb.sandboxes.run(code=code, input=3, config={"unit": "cm"})
    assert run.ok and run.result == {"unit": "cm", "n": 3}
    assert "hello 3" in run.stdout.text and run.stdout.bytes > 0


def test_run_that_raises_is_not_ok(lbb: LbbClient) -> None:
    run = lbb.sandboxes.run(code="def run(input, config):\n    raise ValueError('bad input')", input=None)
    assert run.ok is False and run.status == "failed"
    assert "ValueError" in run.stderr.text and "bad input" in run.stderr.text


def test_run_node_and_shell(lbb: LbbClient) -> None:
    node = lbb.sandboxes.run(code="function run(input, config) { return input.map((x) => x * 2); }", input=[1, 2], language="node")
    assert node.ok and node.result == [2, 4]
    sh = lbb.sandboxes.run(code='jq add > "$LBB_RESULT"', input=[1, 2, 3], base="lbb/shell")  # input on stdin
    assert sh.ok and sh.result == 6


def test_run_past_wait_ms_waits_on_the_command(lbb: LbbClient) -> None:
    code = "import time\ndef run(input, config):\n    time.sleep(1.5)\n    return 'late'"
    early = lbb.sandboxes.run(code=code, wait_ms=0, wait=False)
    assert early.status in ("queued", "running") and early.command.startswith("cmd_")
    done = lbb.commands.wait(early.command)
    assert done.status == "succeeded" and done.result == "late"
    run = lbb.sandboxes.run(code=code, wait_ms=0)
    assert run.ok and run.result == "late"


def test_same_key_runs_once(lbb: LbbClient) -> None:
    k = key()
    code = "import random\ndef run(input, config):\n    return random.random()"
    a = lbb.sandboxes.run(code=code, idempotency_key=k)
    b = lbb.sandboxes.run(code=code, idempotency_key=k)
    assert a.command == b.command and a.result == b.result
    with pytest.raises(sdk.IdempotencyConflictError) as ei:
        lbb.sandboxes.run(code=code + "\n", idempotency_key=k)
    assert ei.value.status == 422 and ei.value.code == "idempotency_key_reused" and ei.value.request_id


def test_errors_are_typed(lbb: LbbClient, server: Any) -> None:
    with pytest.raises(sdk.NotFoundError) as ei:
        lbb.commands.get("cmd_01aaaaaaaaaaaaaaaaaaaaaaaa")
    assert ei.value.code == "not_found" and ei.value.request_id.startswith("req_")
    with pytest.raises(sdk.InvalidRequestError):
        lbb.sandboxes.run(code=SUM, limits={"memory_mib": 1 << 30})
    with pytest.raises(sdk.AuthenticationError):
        LbbClient(server.url, api_key="lbb_sk_wrong").sandboxes.run(code=SUM)
    with pytest.raises(sdk.InvalidRequestError):
        lbb.sandboxes.run(code=SUM, base="lbb/cobol")


def test_unknown_template_is_not_found(lbb: LbbClient) -> None:
    with pytest.raises(sdk.NotFoundError):
        lbb.sandboxes.run(template="no-such-" + uuid.uuid4().hex[:8], input=[1])


# Level 2


def test_templates_versions(lbb: LbbClient) -> None:
    name = "t-" + uuid.uuid4().hex[:10]
    v1 = lbb.sandboxes.templates.create(name=name, code="def run(input, config):\n    return ['v1', config]", config={"unit": "cm"})
    v2 = lbb.sandboxes.templates.create(name=name, code="def run(input, config):\n    return ['v2', config]", config={"unit": "cm"})
    assert (v1.version, v2.version) == (1, 2) and v1.id == v2.id and v1.id.startswith("sbt_")
    assert lbb.sandboxes.run(template=name).result == ["v2", {"unit": "cm"}]
    assert lbb.sandboxes.run(template=f"{name}@1", config={"extra": 1}).result == ["v1", {"unit": "cm", "extra": 1}]
    got = lbb.sandboxes.templates.get(name)
    assert got.version == 2 and sorted(v["version"] for v in got["versions"]) == [1, 2]
    names = [t.name for t in lbb.sandboxes.templates.list()]
    assert name in names
    assert lbb.sandboxes.templates.get("lbb/python")["base"] is True


# Level 3


def test_sandbox_files_commands_stop_resume(lbb: LbbClient) -> None:
    sb = lbb.sandboxes.create(expires_in_seconds=300)
    try:
        assert sb.id.startswith("sbx_") and sb.status in ("starting", "running")
        sb.files.write("dir/a.txt", b"\x00\x01binary")
        assert sb.files.read("dir/a.txt") == b"\x00\x01binary"
        entries = sb.files.list("dir")
        assert any(e.path.endswith("a.txt") and e.type == "file" and e.size == 8 for e in entries)
        cmd = sb.commands.create(argv=["bash", "-c", "echo out; echo err >&2; exit 3"], wait_ms=30_000)
        assert cmd.status == "failed" and cmd.exit_code == 3
        assert "out" in cmd.stdout.text and "err" in cmd.stderr.text
        got = lbb.commands.get(cmd.id)
        assert got.exit_code == 3 and got["kind"] == "process"
        assert sb.commands.run(["cat"], stdin="piped").stdout.text == "piped"
        sb.stop()
        assert sb.refresh().status == "stopped"
        sb.resume()
        assert sb.files.read_text("dir/a.txt") == "\x00\x01binary", "the disk stays across stop and resume"
        with pytest.raises(sdk.PathOutsideWorkspaceError):
            sb.files.read("../../etc/passwd")
    finally:
        sb.delete()
    assert lbb.sandboxes.get(sb.id).status == "destroyed"


def test_sandbox_run_sees_its_files(lbb: LbbClient) -> None:
    with lbb.sandboxes.scoped() as sb:
        sb.files.write("n.txt", "41")
        run = sb.run(code="def run(input, config):\n    return int(open('n.txt').read()) + input", input=1)
        assert run.ok and run.result == 42 and run.command.startswith("cmd_")


def test_scoped_deletes_after_an_error(lbb: LbbClient) -> None:
    seen = {}
    with pytest.raises(RuntimeError):
        with lbb.sandboxes.scoped() as sb:
            seen["id"] = sb.id
            raise RuntimeError("in the block")
    assert lbb.sandboxes.get(seen["id"]).status == "destroyed"


def test_stream_output(lbb: LbbClient) -> None:
    with lbb.sandboxes.scoped() as sb:
        cmd = sb.commands.create(argv=["bash", "-c", "for i in 1 2 3; do echo line$i; sleep 0.2; done"])
        # Chunks, then an exit event (issue 4); whatever the events are named, the chunks' text
        # joins to the output.
        control = {"exit", "end", "done", "error", "status", "ping", "keepalive"}
        text = "".join(ev.text for ev in lbb.commands.stream(cmd.id) if ev.event not in control)
        assert text.replace("\r", "") == "line1\nline2\nline3\n"
        assert lbb.commands.wait(cmd.id).exit_code == 0


def test_files_mkdir_and_recursive_delete(lbb: LbbClient) -> None:
    with lbb.sandboxes.scoped() as sb:
        d = sb.files.mkdir("a/b/c")
        assert d.type == "dir" and d.path.endswith("a/b/c")
        sb.files.write("a/b/c/f.txt", "x")
        with pytest.raises(sdk.ConflictError):
            sb.files.delete("a")  # not empty, and not recursive
        assert sb.files.read_text("a/b/c/f.txt") == "x"
        sb.files.delete("a", recursive=True)
        assert "a" not in [e.get("name") for e in sb.files.list(".")]
        with pytest.raises(sdk.NotFoundError):
            sb.files.read("a/b/c/f.txt")


def test_command_stdin_open_write_and_close(lbb: LbbClient) -> None:
    with lbb.sandboxes.scoped() as sb:
        cmd = sb.commands.create(["cat"], stdin_open=True)
        assert cmd.status == "running"
        w1 = sb.commands.write_stdin(cmd.id, "hello ")
        assert (w1["bytes"], w1["total"], w1["closed"]) == (6, 6, False)
        w2 = lbb.commands.write_stdin(cmd.id, b"world", close=True)
        assert (w2["bytes"], w2["total"], w2["closed"]) == (5, 11, True)
        done = lbb.commands.wait(cmd.id, timeout=60)
        assert done.status == "succeeded" and done.stdout.text == "hello world"
        with pytest.raises(sdk.ConflictError):
            lbb.commands.write_stdin(cmd.id, "late")
        # A command started without stdin_open takes no writes.
        other = sb.commands.create(["sleep", "30"])
        with pytest.raises(sdk.ConflictError):
            sb.commands.write_stdin(other.id, "x")
        sb.commands.kill(other.id)


def test_list_sandboxes_by_status_and_label(lbb: LbbClient) -> None:
    tag = uuid.uuid4().hex[:10]
    with lbb.sandboxes.scoped(metadata={"suite": tag, "kind": "a"}) as a, lbb.sandboxes.scoped(metadata={"suite": tag, "kind": "b"}) as b:
        assert sorted(s["id"] for s in lbb.sandboxes.list(label={"suite": tag})) == sorted([a.id, b.id])
        assert [s["id"] for s in lbb.sandboxes.list(label=[f"suite={tag}", "kind=b"])] == [b.id]
        assert [s["id"] for s in lbb.sandboxes.list(label=f"suite={tag}-none")] == []
        a.stop()
        assert [s["id"] for s in lbb.sandboxes.list(status="stopped", label={"suite": tag})] == [a.id]
        assert [s["id"] for s in lbb.sandboxes.list(status="running", label={"suite": tag})] == [b.id]
        with pytest.raises(sdk.InvalidRequestError):
            lbb.sandboxes.list(label="no-equals-sign")


def test_list_sandboxes_paginates(lbb: LbbClient) -> None:
    page = lbb.sandboxes.list(limit=1)
    assert len(page) <= 1
    if page.next_cursor:
        nxt = lbb.sandboxes.list(limit=1, cursor=page.next_cursor)
        assert not nxt or nxt[0]["id"] != page[0]["id"]


def test_openapi_has_the_routes_the_sdk_calls(lbb: LbbClient) -> None:
    doc = lbb.openapi()
    paths = doc.get("paths", {})
    used = [
        ("post", "/v1/sandboxes"), ("get", "/v1/sandboxes"), ("get", "/v1/sandboxes/{id}"), ("delete", "/v1/sandboxes/{id}"),
        ("post", "/v1/sandboxes/{id}/stop"), ("post", "/v1/sandboxes/{id}/resume"), ("post", "/v1/sandboxes/{id}/run"),
        ("post", "/v1/sandboxes/{id}/commands"), ("get", "/v1/sandboxes/{id}/commands"), ("get", "/v1/commands/{id}"),
        ("get", "/v1/commands/{id}/output"), ("post", "/v1/commands/{id}/kill"),
        ("put", "/v1/sandboxes/{id}/files/content"), ("get", "/v1/sandboxes/{id}/files/content"),
        ("get", "/v1/sandboxes/{id}/files"), ("delete", "/v1/sandboxes/{id}/files"),
        ("post", "/v1/sandboxes/{id}/files/mkdir"), ("post", "/v1/commands/{id}/stdin"),
        ("post", "/v1/sandboxes/templates"), ("get", "/v1/sandboxes/templates"), ("get", "/v1/sandboxes/templates/{name}"),
        ("post", "/v1/files"), ("get", "/v1/files"), ("get", "/v1/files/{id}"), ("get", "/v1/files/{id}/content"),
        ("put", "/v1/sandboxes/files/content"), ("delete", "/v1/files/{id}"), ("get", "/v1/quotas"),
    ]
    missing = [f"{m.upper()} {p}" for m, p in used if m not in paths.get(p, {})]
    assert not missing, f"routes the SDK calls that /v1/openapi.json does not have: {missing}"


def test_files_delete_and_quotas(lbb: LbbClient) -> None:
    before = lbb.quotas()
    assert before.graph == "main" and before.max_result_bytes == 1 << 20
    files = before.quotas["files"]
    assert files.unit == "count" and files.limit > 0
    data = uuid.uuid4().hex.encode() * 3
    f = lbb.files.upload(data, name="q.bin")
    after = lbb.quotas()
    assert after.quotas["files"].usage == files.usage + 1
    assert after.quotas["file_bytes"].usage == before.quotas["file_bytes"].usage + len(data)
    gone = lbb.files.delete(f.id)
    assert gone.id == f.id and gone.size == len(data)
    with pytest.raises(sdk.NotFoundError):
        lbb.files.get(f.id)
    with pytest.raises(sdk.NotFoundError):
        lbb.files.delete(f.id)
    assert lbb.quotas().quotas["files"].usage == files.usage


def test_async_files_delete_and_quotas(server: Any) -> None:
    async def main() -> None:
        async with sdk.AsyncLbbClient(server.url, api_key=server.key, graph="main") as c:
            f = await c.files.upload(b"async quota bytes", name="a.bin")
            assert (await c.quotas()).quotas["files"].usage >= 1
            assert (await c.files.delete(f.id)).sha256 == f.sha256

    asyncio.run(main())


# The async client


def test_async_client_runs(server: Any) -> None:
    async def main() -> None:
        async with sdk.AsyncLbbClient(server.url, api_key=server.key, graph="main") as c:
            runs = await asyncio.gather(*(c.sandboxes.run(code=SUM, input=[i, i]) for i in range(3)))
            assert [r.result for r in runs] == [0, 2, 4]
            assert len({r.command for r in runs}) == 3
            with pytest.raises(sdk.NotFoundError):
                await c.commands.get("cmd_01aaaaaaaaaaaaaaaaaaaaaaaa")

    asyncio.run(main())


def test_async_client_sandboxes(server: Any) -> None:
    async def main() -> None:
        async with sdk.AsyncLbbClient(server.url, api_key=server.key, graph="main") as c:

            async def body(sb: sdk.AsyncSandbox) -> Any:
                await sb.files.write("x.txt", "abc")
                return (await sb.commands.create(argv=["cat", "x.txt"], wait_ms=30_000)).stdout.text

            assert await c.sandboxes.scoped({}, body) == "abc"
            async with c.sandboxes.scoped() as sb:
                r = await sb.run(code="def run(input, config):\n    return input * 2", input=21)
                assert r.result == 42
                cmd = await sb.commands.create(argv=["bash", "-c", "echo a; sleep 0.2; echo b"])
                control = {"exit", "end", "done", "error", "status", "ping", "keepalive"}
                text = "".join([ev.text async for ev in c.commands.stream(cmd.id) if ev.event not in control])
                assert text == "a\nb\n"

    asyncio.run(main())


def test_async_client_stdin_files_and_labels(server: Any) -> None:
    async def main() -> None:
        async with sdk.AsyncLbbClient(server.url, api_key=server.key, graph="main") as c:
            tag = uuid.uuid4().hex[:10]
            async with c.sandboxes.scoped(metadata={"suite": tag}) as sb:
                assert [s["id"] for s in await c.sandboxes.list(status="running", label={"suite": tag})] == [sb.id]
                assert (await sb.files.mkdir("d/e")).type == "dir"
                await sb.files.write("d/e/f.txt", "x")
                with pytest.raises(sdk.ConflictError):
                    await sb.files.delete("d")
                await sb.files.delete("d", recursive=True)
                assert "d" not in [e.get("name") for e in await sb.files.list(".")]
                cmd = await sb.commands.create(["cat"], stdin_open=True)
                await sb.commands.write_stdin(cmd.id, "async ")
                w = await c.commands.write_stdin(cmd.id, "stdin", close=True)
                assert (w["total"], w["closed"]) == (11, True)
                assert (await c.commands.wait(cmd.id, timeout=60)).stdout.text == "async stdin"

    asyncio.run(main())
