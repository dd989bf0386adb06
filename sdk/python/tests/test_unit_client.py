"""The clients against a scripted local server: idempotency keys, retries, 202 waits, records,
scoped cleanup and streams (no lbb server needed)."""

import asyncio
import json
import uuid

import pytest

import lbb
from lbb._sse import LineSplitter, SSEDecoder

from fakeserver import RUN_OK, FakeServer, Reply, error

CODE = "def run(input, config):\n    return sum(input)"


def fail_first(status=503, headers=None):
    def handler(seen, nth):
        if nth == 1:
            return error(status, "unavailable", "draining") if status != 0 else Reply(drop=True)
        return Reply(200, RUN_OK)

    return handler


@pytest.mark.parametrize("status", [503, 0], ids=["503", "connection-dropped"])
def test_retry_reuses_the_idempotency_key(status):
    with FakeServer(fail_first(status)) as srv:
        c = lbb.LbbClient(srv.url, api_key="secret", graph="g1")
        run = c.sandboxes.run(code=CODE, input=[1, 2, 3])
        assert run.result == 6
        posts = srv.requests("POST", "/v1/sandboxes")
        assert len(posts) == 2
        keys = {p.headers["idempotency-key"] for p in posts}
        assert len(keys) == 1, "a retry must send the same Idempotency-Key"
        uuid.UUID(keys.pop())
        assert posts[0].body == posts[1].body
        assert all(p.query["graph"] == "g1" for p in posts)
        assert all(p.headers["authorization"] == "Bearer secret" for p in posts)
        assert posts[0].json() == {"run": {"code": CODE, "input": [1, 2, 3]}}


def test_each_logical_call_gets_a_fresh_key_and_explicit_keys_are_sent():
    with FakeServer(lambda seen, nth: Reply(200, RUN_OK)) as srv:
        c = lbb.LbbClient(srv.url, api_key="k")
        c.sandboxes.run(code=CODE, input=[1])
        c.sandboxes.run(code=CODE, input=[1])
        c.sandboxes.run(code=CODE, input=[1], idempotency_key="sum-a")
        keys = [p.headers["idempotency-key"] for p in srv.requests("POST", "/v1/sandboxes")]
        assert keys[0] != keys[1] and keys[2] == "sum-a"


def test_retry_after_and_give_up():
    def handler(seen, nth):
        return Reply(503, {"error": {"code": "unavailable", "message": "down", "request_id": f"req_{nth}"}}, {"Retry-After": "0"})

    with FakeServer(handler) as srv:
        c = lbb.LbbClient(srv.url, api_key="k", max_retries=2)
        with pytest.raises(lbb.UnavailableError) as ei:
            c.sandboxes.run(code=CODE)
        assert ei.value.request_id == "req_3"
        assert len(srv.requests("POST", "/v1/sandboxes")) == 3


def test_no_retry_on_client_errors():
    with FakeServer(lambda seen, nth: error(422, "idempotency_key_reused")) as srv:
        c = lbb.LbbClient(srv.url, api_key="k")
        with pytest.raises(lbb.IdempotencyConflictError):
            c.sandboxes.run(code=CODE, idempotency_key="k1")
        assert len(srv.seen) == 1


def test_answer_broken_off_in_its_body_is_retried():
    rec = {"id": "cmd_01b", "sandbox": "sbx_1", "kind": "process", "status": "succeeded", "exit_code": 0}
    with FakeServer(lambda seen, nth: Reply(200, rec, truncate=nth == 1)) as srv:
        c = lbb.LbbClient(srv.url, api_key="k")
        assert c.commands.get("cmd_01b").id == "cmd_01b"
        assert len(srv.requests("GET", "/v1/commands/cmd_01b")) == 2
    with FakeServer(lambda seen, nth: Reply(200, rec, truncate=True)) as srv:
        with pytest.raises(lbb.APIConnectionError) as ei:
            lbb.LbbClient(srv.url, api_key="k", max_retries=1).sandboxes.get("sbx_1")
        assert ei.value.code == "connection_error"

        async def main():
            async with lbb.AsyncLbbClient(srv.url, api_key="k", max_retries=1) as ac:
                with pytest.raises(lbb.APIConnectionError):
                    await ac.sandboxes.get("sbx_1")

        asyncio.run(main())


def test_202_waits_on_the_command():
    running = dict(RUN_OK, ok=False, result=None, status="running", exit_code=None)

    def handler(seen, nth):
        if seen.method == "POST":
            return Reply(202, running)
        assert seen.path == "/v1/commands/cmd_01test"
        assert int(seen.query["wait_ms"]) > 0
        if nth == 1:
            return Reply(200, {"id": "cmd_01test", "sandbox": "sbx_01test", "kind": "run", "status": "running", "ok": False})
        return Reply(200, {"id": "cmd_01test", "sandbox": "sbx_01test", "kind": "run", "status": "succeeded", "ok": True,
                           "result": 6, "exit_code": 0, "stdout": {"head": "x", "tail": "", "bytes": 1},
                           "stderr": {"head": "", "tail": "", "bytes": 0}, "duration_ms": 1200})

    with FakeServer(handler) as srv:
        c = lbb.LbbClient(srv.url, api_key="k")
        run = c.sandboxes.run(code=CODE, input=[1, 2, 3], wait_ms=0)
        assert srv.requests("POST", "/v1/sandboxes")[0].json()["wait_ms"] == 0
        assert (run.ok, run.result, run.command, run.status, run.exit_code) == (True, 6, "cmd_01test", "succeeded", 0)
        assert run.stdout.head == "x" and run["stdout"]["bytes"] == 1 and run.duration_ms == 1200
        assert len(srv.requests("GET", "/v1/commands/cmd_01test")) == 2

        early = c.sandboxes.run(code=CODE, wait_ms=0, wait=False)
        assert early.status == "running" and not early.done


def test_records_read_as_keys_and_attributes():
    r = lbb.RunResult(RUN_OK)
    assert r.ok is True and r["ok"] is True
    assert r.result == 6 == r["result"]
    assert r.command.startswith("cmd_") and r.sandbox.startswith("sbx_")
    assert r.stdout.head == "hi\n" == r["stdout"]["head"]
    assert isinstance(r.stdout, lbb.Output) and r.stdout.text == "hi\n" and not r.stdout.truncated
    assert json.loads(json.dumps(r)) == RUN_OK
    r2 = lbb.RunResult(dict(RUN_OK, new_field={"a": 1}))
    assert r2.new_field.a == 1
    with pytest.raises(AttributeError):
        r.nope  # noqa: B018
    o = lbb.Output({"head": "ab", "tail": "yz", "bytes": 10})
    assert o.truncated and o.text == "ab\n…\nyz"
    assert lbb.Output({"head": "ab", "tail": "cd", "bytes": 4}).text == "abcd"
    assert lbb.Output({"head": "abcd", "tail": "abcd", "bytes": 4}).text == "abcd"


def sandbox_server(log):
    """Enough of Level 3 for the client: create, delete, files, commands."""

    def handler(seen, nth):
        log.append((seen.method, seen.path))
        if seen.method == "POST" and seen.path == "/v1/sandboxes":
            return Reply(201, {"id": "sbx_01l3", "status": "running", "expires_at": "2030-01-01T00:00:00Z"})
        if seen.method == "DELETE" and seen.path == "/v1/sandboxes/sbx_01l3":
            return Reply(200, {"id": "sbx_01l3", "status": "destroyed"})
        if seen.path == "/v1/sandboxes/sbx_01l3/files/content":
            if seen.method == "PUT":
                return Reply(200, {"path": "/workspace/" + seen.query["path"], "size": len(seen.body)})
            return Reply(200, b"1,2\n3,4\n")
        if seen.path == "/v1/sandboxes/sbx_01l3/files":
            return Reply(200, {"data": [{"name": "data.csv", "path": "/workspace/data.csv", "type": "file", "size": 8}]})
        if seen.path == "/v1/sandboxes/sbx_01l3/commands":
            return Reply(200, {"id": "cmd_01c", "sandbox": "sbx_01l3", "kind": "process", "status": "succeeded", "exit_code": 0,
                               "stdout": {"head": "1,2\n3,4\n\n", "tail": "1,2\n3,4\n\n", "bytes": 9}, "stderr": {"head": "", "tail": "", "bytes": 0}})
        if seen.path in ("/v1/sandboxes/sbx_01l3/stop", "/v1/sandboxes/sbx_01l3/resume"):
            return Reply(200, {"id": "sbx_01l3", "status": "stopped" if seen.path.endswith("stop") else "running"})
        return error(404, "not_found")

    return handler


def test_scoped_deletes_after_success_and_after_error():
    log = []
    with FakeServer(sandbox_server(log)) as srv:
        c = lbb.LbbClient(srv.url, api_key="k")
        with c.sandboxes.scoped() as sb:
            assert sb.id == "sbx_01l3"
            sb.files.write("data.csv", "1,2\n3,4\n")
            assert sb.files.read("data.csv") == b"1,2\n3,4\n"
            assert sb.files.read_text("data.csv") == "1,2\n3,4\n"
            [entry] = sb.files.list(".")
            assert entry.path == "/workspace/data.csv" and entry.type == "file"
            upper = sb.commands.create(argv=["python", "upper.py"], wait_ms=30_000)
            assert upper["stdout"]["tail"].startswith("1,2") and upper.id == "cmd_01c"
        assert log[-1] == ("DELETE", "/v1/sandboxes/sbx_01l3")
        put = srv.requests("PUT", "/v1/sandboxes/sbx_01l3/files/content")[0]
        assert put.body == b"1,2\n3,4\n" and put.query["path"] == "data.csv" and put.headers["idempotency-key"]
        cmd = srv.requests("POST", "/v1/sandboxes/sbx_01l3/commands")[0]
        assert cmd.json() == {"argv": ["python", "upper.py"], "wait_ms": 30000} and cmd.headers["idempotency-key"]
        create = srv.requests("POST", "/v1/sandboxes")[0]
        assert create.json() == {} and create.headers["idempotency-key"]

        log.clear()
        with pytest.raises(ZeroDivisionError):
            with c.sandboxes.scoped({"expires_in_seconds": 60}) as sb:
                1 / 0
        assert log == [("POST", "/v1/sandboxes"), ("DELETE", "/v1/sandboxes/sbx_01l3")]
        assert srv.requests("POST", "/v1/sandboxes")[-1].json() == {"expires_in_seconds": 60}

        log.clear()
        got = c.sandboxes.scoped({}, lambda sb: sb.id)
        assert got == "sbx_01l3" and log[-1] == ("DELETE", "/v1/sandboxes/sbx_01l3")


def test_create_stop_resume_delete():
    log = []
    with FakeServer(sandbox_server(log)) as srv:
        c = lbb.LbbClient(srv.url, api_key="k")
        sb = c.sandboxes.create({"expires_in_seconds": 600})
        assert sb.stop().status == "stopped" and sb.status == "stopped"
        assert sb.resume().status == "running"
        sb.delete()
        assert [m for m, _ in log] == ["POST", "POST", "POST", "DELETE"]
        assert srv.requests("POST", "/v1/sandboxes")[0].json() == {"expires_in_seconds": 600}


def test_async_client_same_surface():
    log = []

    async def main(url):
        async with lbb.AsyncLbbClient(url, api_key="k") as c:
            async with c.sandboxes.scoped() as sb:
                await sb.files.write("data.csv", "1,2\n")
                assert await sb.files.read("data.csv") == b"1,2\n3,4\n"
                upper = await sb.commands.create(argv=["python", "upper.py"], wait_ms=30_000)
                assert upper["stdout"]["tail"].startswith("1,2")
            assert log[-1] == ("DELETE", "/v1/sandboxes/sbx_01l3")

            async def fn(sb):
                return sb.id

            assert await c.sandboxes.scoped({}, fn) == "sbx_01l3"

            with pytest.raises(KeyError):
                async with c.sandboxes.scoped() as sb:
                    raise KeyError("boom")
            assert log[-1] == ("DELETE", "/v1/sandboxes/sbx_01l3")

    with FakeServer(sandbox_server(log)) as srv:
        asyncio.run(main(srv.url))


def test_async_retry_reuses_the_key():
    async def main(url):
        async with lbb.AsyncLbbClient(url, api_key="k") as c:
            run = await c.sandboxes.run(code=CODE, input=[1, 2, 3])
            assert run.result == 6 and run.command == "cmd_01test"

    with FakeServer(fail_first(503)) as srv:
        asyncio.run(main(srv.url))
        posts = srv.requests("POST", "/v1/sandboxes")
        assert len(posts) == 2 and posts[0].headers["idempotency-key"] == posts[1].headers["idempotency-key"]


def test_sse_decoder():
    d = SSEDecoder()
    lines = [": hello", "id: 1", "event: stdout", "data: a", "data: b", "", "data: {\"data\": \"c\"}", "", "retry: 10", "event: exit", "data: {\"exit_code\": 0}", ""]
    evs = [e for e in (d.feed(x) for x in lines) if e is not None]
    assert [(e.event, e.data, e.id) for e in evs] == [("stdout", "a\nb", "1"), ("message", '{"data": "c"}', "1"), ("exit", '{"exit_code": 0}', "1")]
    assert evs[1].text == "c" and evs[2].json() == {"exit_code": 0} and evs[2].retry == 10


def test_line_splitter():
    split = LineSplitter()
    long = b"data: " + b"x" * 200_000
    got = []
    for i in range(0, len(long), 1000):  # a long line in many pieces
        got += split.feed(long[i : i + 1000])
    got += split.feed(b"\r\nid: 1\n\nlast")
    assert got == [long.decode(), "id: 1", ""] and split.flush() == ["last"] and split.flush() == []


def test_stream_reconnects_with_last_event_id():
    def handler(seen, nth):
        assert seen.query["stream"] == "stdout" and seen.query["follow"] == "true"
        if nth % 2 == 1:  # the first connection of each client breaks after one event
            return Reply(stream=["id: 1\nevent: stdout\ndata: one\n\n", None])
        assert seen.headers.get("last-event-id") == "1"
        return Reply(stream=["id: 2\nevent: stdout\ndata: two\n\n", "id: 3\nevent: exit\ndata: {\"exit_code\": 0}\n\n"])

    with FakeServer(handler) as srv:
        c = lbb.LbbClient(srv.url, api_key="k")
        evs = list(c.commands.stream("cmd_01s"))
        assert [(e.event, e.data) for e in evs] == [("stdout", "one"), ("stdout", "two"), ("exit", '{"exit_code": 0}')]

        async def main():
            async with lbb.AsyncLbbClient(srv.url, api_key="k") as ac:
                return [e.data async for e in ac.commands.stream("cmd_01s")]

        assert asyncio.run(main()) == ["one", "two", '{"exit_code": 0}']


def test_defaults_from_the_environment(monkeypatch):
    monkeypatch.setenv("LBB_URL", "http://example.invalid:1/")
    monkeypatch.setenv("LBB_API_KEY", "from-env")
    monkeypatch.delenv("LBB_GRAPH", raising=False)
    c = lbb.LbbClient()
    assert c.base_url == "http://example.invalid:1" and c.graph == "main"
    assert c._api.headers["Authorization"] == "Bearer from-env"
    monkeypatch.delenv("LBB_URL")
    assert lbb.LbbClient(api_key="x").base_url == "http://127.0.0.1:7700"


def test_a_shell_line_runs_under_bash():
    # A string was a TypeError; now it is a shell line, as E2B's and Daytona's commands take.
    with FakeServer(lambda s, n: Reply(200, {"id": "cmd_1", "status": "running"})) as srv:
        sb = lbb.Sandbox(lbb.LbbClient(srv.url, api_key="k")._api, {"id": "sbx_1"})
        sb.commands.create("ls -l | wc -l")
        sb.commands.create(["python", "upper.py"])
        with pytest.raises(TypeError):
            sb.commands.create(b"python upper.py")
        bodies = [p.json() for p in srv.requests("POST", "/v1/sandboxes/sbx_1/commands")]
        assert [b["argv"] for b in bodies] == [["bash", "-lc", "ls -l | wc -l"], ["python", "upper.py"]]


def _event(name, data, id=None):
    return (f"id: {id}\n" if id else "") + f"event: {name}\ndata: {json.dumps(data)}\n\n"


RECORD = {"id": "cmd_1", "sandbox": "sbx_1", "status": "running", "stdout": {"head": "", "tail": "", "bytes": 0}, "stderr": {"head": "", "tail": "", "bytes": 0}}


def _exit(out_bytes, err_bytes, tail="3\n"):
    return dict(RECORD, status="succeeded", exit_code=0, stdout={"head": "", "tail": tail, "bytes": out_bytes}, stderr={"head": "", "tail": "e\n", "bytes": err_bytes})


def test_commands_run_streams_every_chunk():
    def handler(seen, nth):
        assert seen.json()["stream"] is True and seen.headers["accept"] == "text/event-stream" and seen.headers["idempotency-key"]
        return Reply(
            stream=[
                _event("command", RECORD),
                _event("stdout", {"stream": "stdout", "offset": 0, "data": "1\n2\n"}, "4.0"),
                _event("stderr", {"stream": "stderr", "offset": 0, "data": "e\n"}, "4.2"),
                _event("stdout", {"stream": "stdout", "offset": 4, "data": "\ufffd", "base64": "/w=="}, "5.2"),
                _event("stdout", {"stream": "stdout", "offset": 5, "data": "3\n"}, "7.2"),
                _event("exit", _exit(7, 2)),
            ]
        )

    with FakeServer(handler) as srv:
        sb = lbb.Sandbox(lbb.LbbClient(srv.url, api_key="k")._api, {"id": "sbx_1"})
        got = []
        cmd = sb.commands.run("seq 1 3", on_stdout=lambda t: got.append(("out", t)), on_stderr=lambda t: got.append(("err", t)), output_limit=6)
        assert got == [("out", "1\n2\n"), ("err", "e\n"), ("out", "\ufffd"), ("out", "3\n")]
        assert cmd.exit_code == 0 and cmd.stdout.data == b"1\n2\n\xff3" and cmd.stdout.truncated
        assert cmd.stderr.text == "e\n" and not cmd.stderr.truncated
        assert srv.requests("POST", "/v1/sandboxes/sbx_1/commands")[0].json()["argv"] == ["bash", "-lc", "seq 1 3"]
        # Without output_limit the answer is the record: head and tail.
        plain = sb.commands.run(argv=["seq", "1", "3"])  # the keyword it had before shell lines
        assert plain.stdout.data is None and plain.stdout.tail == "3\n" and plain.stdout.truncated

        async def main():
            seen = []

            async def on_stdout(t):  # an async callback is awaited
                seen.append(t)

            async with lbb.AsyncLbbClient(srv.url, api_key="k") as ac:
                cmd = await lbb.AsyncSandbox(ac._api, {"id": "sbx_1"}).commands.run("seq 1 3", on_stdout=on_stdout, output_limit=100)
            return seen, cmd

        seen, cmd = asyncio.run(main())
        assert seen == ["1\n2\n", "\ufffd", "3\n"] and cmd.stdout.data == b"1\n2\n\xff3\n" and not cmd.stdout.truncated


def test_commands_run_says_when_output_was_lost():
    def handler(seen, nth):
        return Reply(
            stream=[
                _event("command", RECORD),
                _event("stdout", {"stream": "stdout", "offset": 0, "data": "1\n"}, "2.0"),
                _event("stdout", {"stream": "stdout", "offset": 10, "data": "3\n"}, "12.0"),  # 8 bytes let go
                _event("exit", _exit(14, 0)),  # and 2 more at the end
            ]
        )

    with FakeServer(handler) as srv:
        sb = lbb.Sandbox(lbb.LbbClient(srv.url, api_key="k")._api, {"id": "sbx_1"})
        with pytest.raises(lbb.OutputLostError) as e:
            sb.commands.run("seq 1 3", output_limit=100)
        assert e.value.lost_bytes == 10 and e.value.command.stdout.data == b"1\n3\n" and "10 bytes" in str(e.value)


def test_commands_run_resumes_a_broken_stream():
    def handler(seen, nth):
        if nth == 1:
            return Reply(stream=[_event("command", RECORD), _event("stdout", {"stream": "stdout", "offset": 0, "data": "1\n"}, "2.0"), None])
        assert seen.headers["last-event-id"] == "2.0"
        return Reply(stream=[_event("command", RECORD), _event("stdout", {"stream": "stdout", "offset": 2, "data": "2\n"}, "4.0"), _event("exit", _exit(4, 0, "2\n"))])

    with FakeServer(handler) as srv:
        sb = lbb.Sandbox(lbb.LbbClient(srv.url, api_key="k")._api, {"id": "sbx_1"})
        cmd = sb.commands.run("seq 1 2", output_limit=100)
        posts = srv.requests("POST", "/v1/sandboxes/sbx_1/commands")
        assert cmd.stdout.text == "1\n2\n" and len(posts) == 2
        assert posts[0].headers["idempotency-key"] == posts[1].headers["idempotency-key"], "the retry is the same call"


def test_egress_grant_and_git_on_the_wire():
    def handler(seen, nth):
        if seen.json().get("run"):
            return Reply(200, RUN_OK)
        return Reply(201, {"id": "sbx_e", "status": "running", "egress": {"mode": "public", "quota_bytes": 9}})

    with FakeServer(handler) as srv:
        c = lbb.LbbClient(srv.url, api_key="k")
        c.sandboxes.run(CODE, [1], egress={"mode": "allowlist", "allow": ["pkgs.example.org"]})
        sb = c.sandboxes.create(egress={"mode": "public"}, api={"scopes": ["sandboxes:read"]}, git={"url": "https://example.org/r.git"})
        run_body, create_body = [r.json() for r in srv.requests("POST", "/v1/sandboxes")]
        assert run_body["run"]["egress"] == {"mode": "allowlist", "allow": ["pkgs.example.org"]}
        assert create_body == {"egress": {"mode": "public"}, "api": {"scopes": ["sandboxes:read"]}, "git": {"url": "https://example.org/r.git"}}
        assert sb.record["egress"]["quota_bytes"] == 9


def test_session_and_size_on_the_wire():
    workspace = {"sha256": "ab" * 32, "bytes": 3006129, "disk_bytes": 2147483648, "archived_at": "2030-01-01T00:00:00Z"}

    def handler(seen, nth):
        if seen.method == "POST":
            return Reply(200, {"id": "sbx_s", "status": "running", "session": "review-42", "size": "standard-2"})
        return Reply(200, {"data": [{"id": "sbx_s", "status": "stopped", "session": "review-42", "size": "standard-2", "workspace": workspace}]})

    with FakeServer(handler) as srv:
        c = lbb.LbbClient(srv.url, api_key="k")
        sb = c.sandboxes.create(session="review-42", size="small")
        assert srv.requests("POST", "/v1/sandboxes")[-1].json() == {"session": "review-42", "size": "small"}
        assert sb.record["session"] == "review-42" and sb.record["size"] == "standard-2"
        page = c.sandboxes.list(session="review-42")
        assert srv.requests("GET", "/v1/sandboxes")[-1].query["session"] == "review-42"
        rec = page[0]
        assert (rec.session, rec.size, rec.workspace.disk_bytes, rec.workspace.sha256) == ("review-42", "standard-2", 2147483648, "ab" * 32)
