"""Isolation, pause, resume, snapshots and forks against a scripted local server: the requests
the clients send (sync and async) and the records they read back (no lbb server needed)."""

import asyncio

import pytest

import lbb

from fakeserver import FakeServer, Reply, error

SBX = {"id": "sbx_01src", "graph": "main", "status": "running", "isolation": "gvisor"}
SNAP = {
    "id": "snp_01a",
    "graph": "main",
    "sandbox": "sbx_01src",
    "isolation": "gvisor",
    "memory": True,
    "size_bytes": 123,
    "created_at": "2030-01-01T00:00:00Z",
    "duration_ms": 152.3,
    "metadata": {"step": "1"},
}
FORK = dict(SBX, id="sbx_01fork", forked_from={"sandbox": "sbx_01src", "snapshot": "snp_01a"})


def handler(seen, nth):
    p, m = seen.path, seen.method
    if m == "POST" and p == "/v1/sandboxes":
        body = seen.json()
        if "run" in body:
            return Reply(200, {"ok": True, "result": 1, "command": "cmd_01r", "sandbox": "sbx_01r", "status": "succeeded",
                               "isolation": body["run"].get("isolation", "ns")})
        return Reply(201, dict(SBX, isolation=body.get("isolation", "ns")))
    if m == "POST" and p == "/v1/sandboxes/templates":
        return Reply(201, {"id": "tpl_01", "name": "t", "version": 1, "isolation": seen.json().get("isolation")})
    if m == "POST" and p == "/v1/sandboxes/sbx_01src/pause":
        return Reply(200, dict(SBX, status="paused", paused_at="2030-01-01T00:00:01Z"))
    if m == "POST" and p == "/v1/sandboxes/sbx_01src/resume":
        return Reply(200, SBX)
    if m == "POST" and p == "/v1/sandboxes/sbx_01src/snapshot":
        return Reply(201, SNAP)
    if m == "POST" and p == "/v1/sandboxes/sbx_01src/fork":
        return Reply(201, FORK)
    if m == "GET" and p == "/v1/sandboxes/sbx_01src/snapshots":
        return Reply(200, {"snapshots": [SNAP], "next_cursor": "c2"})
    if p == "/v1/snapshots/snp_01a":
        return Reply(200, SNAP)
    if p == "/v1/sandboxes/sbx_01ns/snapshot":
        return error(409, "not_supported", 'memory snapshots need isolation "gvisor"; sandbox sbx_01ns runs on "ns"')
    if p == "/v1/sandboxes/sbx_01ns/pause":
        return error(409, "commands_running", "a command still runs in sandbox sbx_01ns")
    return error(404, "not_found")


def check_requests(srv):
    create = srv.requests("POST", "/v1/sandboxes")
    assert create[0].json() == {"isolation": "gvisor", "expires_in_seconds": 60}
    assert create[1].json() == {"run": {"code": "x", "isolation": "gvisor"}}
    assert srv.requests("POST", "/v1/sandboxes/templates")[0].json() == {"name": "t", "code": "x", "isolation": "gvisor"}
    pause = srv.requests("POST", "/v1/sandboxes/sbx_01src/pause")[0]
    assert pause.body == b"" and pause.headers["idempotency-key"]
    snaps = srv.requests("POST", "/v1/sandboxes/sbx_01src/snapshot")
    assert snaps[0].json() == {} and snaps[1].json() == {"metadata": {"step": "1"}}
    forks = srv.requests("POST", "/v1/sandboxes/sbx_01src/fork")
    assert forks[0].json() == {}
    assert forks[1].json() == {"snapshot": "snp_01a", "metadata": {"a": "b"}, "expires_in_seconds": 600, "env": {"K": "v"}}
    assert forks[1].headers["idempotency-key"] == "fork-1"
    assert srv.requests("GET", "/v1/sandboxes/sbx_01src/snapshots")[0].query == {"graph": "main", "limit": "5"}
    assert len(srv.requests("DELETE", "/v1/snapshots/snp_01a")) == 1


def check_snapshot(s):
    assert isinstance(s, lbb.Snapshot)
    assert (s.id, s.sandbox, s.isolation, s.memory, s.size_bytes, s.duration_ms) == ("snp_01a", "sbx_01src", "gvisor", True, 123, 152.3)
    assert s.metadata == {"step": "1"} and s["created_at"] == "2030-01-01T00:00:00Z"


def test_sync_surface():
    with FakeServer(handler) as srv:
        c = lbb.LbbClient(srv.url, api_key="k")
        sb = c.sandboxes.create(isolation="gvisor", expires_in_seconds=60)
        assert sb.record.isolation == "gvisor" and sb.record.paused_at is None and sb.record.forked_from is None
        assert c.sandboxes.run(code="x", isolation="gvisor").isolation == "gvisor"
        assert c.sandboxes.templates.create("t", code="x", isolation="gvisor").isolation == "gvisor"
        rec = sb.pause()
        assert sb.status == "paused" and rec.paused_at == "2030-01-01T00:00:01Z"
        assert sb.resume().status == "running" and sb.record.paused_at is None
        check_snapshot(sb.snapshot())
        check_snapshot(sb.snapshot(metadata={"step": "1"}))
        fork = sb.fork()
        assert isinstance(fork, lbb.Sandbox) and fork.id == "sbx_01fork"
        assert fork.record.forked_from is not None
        assert (fork.record.forked_from.sandbox, fork.record.forked_from.snapshot) == ("sbx_01src", "snp_01a")
        sb.fork("snp_01a", {"a": "b"}, 600, {"K": "v"}, idempotency_key="fork-1")
        page = sb.snapshots(limit=5)
        assert [s.id for s in page] == ["snp_01a"] and page.next_cursor == "c2"
        check_snapshot(page[0])
        check_snapshot(c.snapshots.get("snp_01a"))
        check_snapshot(c.snapshots.delete("snp_01a"))
        assert [s.id for s in c.snapshots.list("sbx_01src")] == ["snp_01a"]
        # Errors with the new codes: the class of their status, the stable code in .code.
        with pytest.raises(lbb.ConflictError) as ei:
            lbb.Sandbox(c._api, {"id": "sbx_01ns"}).snapshot()
        assert type(ei.value) is lbb.NotSupportedError and ei.value.code == "not_supported" and ei.value.status == 409
        with pytest.raises(lbb.CommandsRunningError) as ei2:
            lbb.Sandbox(c._api, {"id": "sbx_01ns"}).pause()
        assert isinstance(ei2.value, lbb.ConflictError) and ei2.value.code == "commands_running"
        check_requests(srv)


def test_async_surface():
    async def main(url):
        async with lbb.AsyncLbbClient(url, api_key="k") as c:
            sb = await c.sandboxes.create(isolation="gvisor", expires_in_seconds=60)
            assert sb.record.isolation == "gvisor"
            assert (await c.sandboxes.run(code="x", isolation="gvisor")).isolation == "gvisor"
            assert (await c.sandboxes.templates.create("t", code="x", isolation="gvisor")).isolation == "gvisor"
            assert (await sb.pause()).status == "paused" and sb.record.paused_at
            assert (await sb.resume()).status == "running"
            check_snapshot(await sb.snapshot())
            check_snapshot(await sb.snapshot(metadata={"step": "1"}))
            fork = await sb.fork()
            assert isinstance(fork, lbb.AsyncSandbox) and fork.record.forked_from.snapshot == "snp_01a"
            await sb.fork(snapshot="snp_01a", metadata={"a": "b"}, expires_in_seconds=600, env={"K": "v"}, idempotency_key="fork-1")
            page = await sb.snapshots(limit=5)
            assert [s.id for s in page] == ["snp_01a"] and page.next_cursor == "c2"
            check_snapshot(await c.snapshots.get("snp_01a"))
            check_snapshot(await c.snapshots.delete("snp_01a"))
            with pytest.raises(lbb.NotSupportedError):
                await lbb.AsyncSandbox(c._api, {"id": "sbx_01ns"}).snapshot()
            with pytest.raises(lbb.CommandsRunningError):
                await lbb.AsyncSandbox(c._api, {"id": "sbx_01ns"}).pause()

    with FakeServer(handler) as srv:
        asyncio.run(main(srv.url))
        check_requests(srv)
