"""Isolation, pause, resume, snapshots and forks through the SDK against a real `lbb serve`
(the suite's server: default isolation ns, gvisor offered beside it when runsc is installed).

On gvisor: pause keeps a process's memory across resume, a snapshot leaves the sandbox
running, a fork starts from the snapshot's memory and files and then goes its own way. On ns:
pause and resume by the freezer; snapshot and fork answer 409 not_supported as a typed error.
The gvisor tests skip, and say why, when /usr/local/lib/lbb/runsc is missing."""

from __future__ import annotations

import asyncio
import os
import pathlib
import time
import uuid
from typing import Any, Callable, List, NamedTuple, Optional

import pytest

import lbb as sdk
from lbb import LbbClient

RUNSC = "/usr/local/lib/lbb/runsc"
needs_gvisor = pytest.mark.skipif(
    not os.path.exists(RUNSC), reason=f"RequiresGvisor: memory snapshots and forks need gvisor, and {RUNSC} is missing"
)

# holder.py (sdk/testdata, shared with the TypeScript suite): a process that keeps its state in
# memory only; see its comment.
HOLDER = (pathlib.Path(__file__).resolve().parents[2] / "testdata" / "holder.py").read_text()


class State(NamedTuple):
    token: str
    n: int
    note: str


def read_state(sb: sdk.Sandbox) -> Optional[State]:
    try:
        f = sb.files.read_text("state").split()
    except sdk.NotFoundError:
        return None
    if len(f) < 3:
        return None
    return State(f[0], int(f[1]), f[3] if len(f) > 3 else "")


def wait_for(what: str, fn: Callable[[], Any], timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout:.0f} s")
        time.sleep(0.1)


def start_holder(sb: sdk.Sandbox) -> State:
    """Starts the holder in the background: the command that starts it ends at once, so no
    command runs (pause and snapshot refuse while one does)."""
    sb.files.write("holder.py", HOLDER)
    cmd = sb.commands.run(["sh", "-c", "setsid python3 /workspace/holder.py </dev/null >/dev/null 2>&1 &"])
    assert cmd.exit_code == 0, cmd
    st: State = wait_for("the holder's first state", lambda: read_state(sb))
    return st


def carries_on(sb: sdk.Sandbox, was: State, what: str) -> State:
    """Waits until the holder counted past was; fails when it is another process."""

    def moved() -> Optional[State]:
        st = read_state(sb)
        return st if st is not None and (st.token != was.token or st.n > was.n + 5) else None

    st: State = wait_for(f"{what}: the holder counting on", moved)
    assert st.token == was.token, f"{what}: the holder is {st}, was {was}: started again, its memory lost"
    return st


def gvisor_sandbox(c: LbbClient, **kw: Any) -> sdk.Sandbox:
    try:
        return c.sandboxes.create(isolation="gvisor", expires_in_seconds=600, **kw)
    except sdk.IsolationUnavailableError as e:
        pytest.fail(f"{RUNSC} is installed but the server cannot run gvisor: {e}")


# Isolation


def test_isolation_on_runs_templates_and_sandboxes(lbb: LbbClient) -> None:
    run = lbb.sandboxes.run(code="def run(input, config):\n    return input", input=1, isolation="ns")
    assert run.ok and run.result == 1 and run.isolation == "ns"
    name = "iso-" + uuid.uuid4().hex[:8]
    tpl = lbb.sandboxes.templates.create(name, code="def run(input, config):\n    return 2", isolation="ns")
    assert tpl.isolation == "ns" and tpl["isolation"] == "ns"
    got = lbb.sandboxes.templates.get(name)
    assert got.isolation == "ns" and [v.get("isolation") for v in got["versions"]] == ["ns"]
    with lbb.sandboxes.scoped(template=name, isolation="ns") as sb:
        assert sb.record.isolation == "ns" and sb.refresh().isolation == "ns"
    # The server default (ns here) when neither the call nor the template names one.
    with lbb.sandboxes.scoped() as sb:
        assert sb.record.isolation == "ns"
    for call in (
        lambda: lbb.sandboxes.run(code="x", isolation="firecracker"),
        lambda: lbb.sandboxes.create(isolation="firecracker"),
        lambda: lbb.sandboxes.templates.create(name, code="x", isolation="firecracker"),
    ):
        with pytest.raises(sdk.InvalidRequestError) as ei:
            call()
        assert ei.value.status == 400 and ei.value.code == "invalid_request"


def test_isolation_unavailable_is_typed(lbb: LbbClient) -> None:
    # A driver lbb knows but this server does not offer: gvisor where runsc is missing, else
    # "local" (the no-isolation dev driver, offered only when it is the server's default).
    unavailable = "local" if os.path.exists(RUNSC) else "gvisor"
    with pytest.raises(sdk.IsolationUnavailableError) as ei:
        lbb.sandboxes.create(isolation=unavailable)
    assert isinstance(ei.value, sdk.InvalidRequestError)
    assert ei.value.status == 400 and ei.value.code == "isolation_unavailable" and ei.value.message


# ns: the freezer; no memory snapshots


def test_ns_pause_resume_and_not_supported(lbb: LbbClient) -> None:
    with lbb.sandboxes.scoped(isolation="ns", expires_in_seconds=300) as sb:
        assert sb.record.isolation == "ns"
        st = start_holder(sb)
        for what, call in (("snapshot", lambda: sb.snapshot()), ("fork", lambda: sb.fork())):
            with pytest.raises(sdk.ConflictError) as ei:
                call()
            e = ei.value
            assert type(e) is sdk.NotSupportedError, f"{what}: {e!r}"
            assert e.status == 409 and e.code == "not_supported" and e.request_id
            assert 'memory snapshots need isolation "gvisor"' in e.message and sb.id in e.message, e.message
        assert list(sb.snapshots()) == []

        paused = sb.pause()
        assert paused.status == "paused" and sb.status == "paused" and paused.paused_at
        assert sb.refresh().status == "paused"
        assert sb.pause().status == "paused", "a repeated pause answers the paused sandbox"
        resumed = sb.resume()
        assert resumed.status == "running" and resumed.paused_at is None
        carries_on(sb, st, "after the thaw")

        # Pause never breaks a running command: it is frozen with the sandbox and runs on after
        # the resume (issue 22; it used to answer 409 commands_running).
        cmd = sb.commands.create(["sleep", "60"])
        assert sb.pause().status == "paused"
        assert sb.commands.get(cmd.id).status == "running"
        assert sb.resume().status == "running"
        assert sb.commands.get(cmd.id).status == "running"
        sb.commands.kill(cmd.id)
    with pytest.raises(sdk.ConflictError) as ei:
        sb.pause()  # deleted: not running
    assert ei.value.code == "conflict"


# gvisor: memory


@needs_gvisor
def test_gvisor_pause_snapshot_fork(lbb: LbbClient) -> None:
    sb = gvisor_sandbox(lbb, metadata={"suite": "py-snap"})
    forks: List[sdk.Sandbox] = []
    try:
        assert sb.record.isolation == "gvisor"
        st = start_holder(sb)

        # A command still running: a pause freezes it and a snapshot carries it on (issue 22;
        # both used to answer 409 commands_running), and the command lives on.
        cmd = sb.commands.create(["sleep", "60"])
        assert sb.pause().status == "paused"
        assert sb.resume().status == "running"
        lbb.snapshots.delete(sb.snapshot().id)  # taken with the command running; not kept
        assert sb.commands.get(cmd.id).status == "running"
        sb.commands.kill(cmd.id)
        sb.commands.wait(cmd.id, timeout=30)

        # Pause: saved with its memory; resume: the same process carries on.
        st = carries_on(sb, st, "before the pause")
        paused = sb.pause()
        assert paused.status == "paused" and paused.paused_at and paused.isolation == "gvisor"
        with pytest.raises(sdk.ConflictError):
            sb.snapshot()  # not running
        resumed = sb.resume()
        assert resumed.status == "running" and resumed.paused_at is None
        st = carries_on(sb, st, "after the resume")

        # A snapshot; the sandbox runs on, the same process.
        sb.files.write("kept.txt", "from the source")
        snap = sb.snapshot(metadata={"step": "1"})
        assert isinstance(snap, sdk.Snapshot) and snap.id.startswith("snp_")
        assert (snap.sandbox, snap.isolation, snap.memory, snap.metadata) == (sb.id, "gvisor", True, {"step": "1"})
        assert snap.size_bytes > 0 and snap.duration_ms > 0 and snap.created_at
        at_snap = carries_on(sb, st, "after the snapshot")
        sb.files.write("after.txt", "written after the snapshot")

        # A fork of it: the snapshot's memory and files, then its own way.
        fork = sb.fork(snap.id, metadata={"fork": "1"}, env={"FORK_VAR": "one"})
        forks.append(fork)
        assert isinstance(fork, sdk.Sandbox) and fork.id != sb.id and fork.status == "running"
        ff = fork.record.forked_from
        assert ff is not None and (ff.sandbox, ff.snapshot) == (sb.id, snap.id)
        assert fork.record.isolation == "gvisor" and fork.record["metadata"] == {"fork": "1"}
        fst = carries_on(fork, at_snap, "in the fork")
        assert fst.token == at_snap.token
        assert fork.files.read_text("kept.txt") == "from the source"
        with pytest.raises(sdk.NotFoundError):
            fork.files.read("after.txt")  # written in the source after the snapshot
        env = fork.commands.run(["sh", "-c", "echo $FORK_VAR"])
        assert env.stdout.text.strip() == "one"
        fork.files.write("note.in", "fork-only")
        wait_for("the fork's holder taking its note", lambda: (read_state(fork) or State("", 0, "")).note == "fork-only")
        assert (read_state(sb) or State("", 0, "")).note == "", "the note of the fork reached the source"

        # A fork without a snapshot takes a fresh one, kept under the source.
        fork2 = sb.fork()
        forks.append(fork2)
        assert fork2.record.forked_from is not None and fork2.record.forked_from.snapshot != snap.id
        carries_on(fork2, at_snap, "in the second fork")
        listed = sb.snapshots()
        assert [s.id for s in listed] == [fork2.record.forked_from.snapshot, snap.id], "newest first"
        assert all(isinstance(s, sdk.Snapshot) for s in listed)
        assert [s.id for s in sb.snapshots(limit=1)] == [fork2.record.forked_from.snapshot]
        assert [s.id for s in lbb.snapshots.list(sb.id)] == [s.id for s in listed]

        # Get and delete by id; forks made from a deleted snapshot run on.
        assert lbb.snapshots.get(snap.id) == snap
        deleted = lbb.snapshots.delete(snap.id)
        assert deleted.id == snap.id
        with pytest.raises(sdk.NotFoundError):
            lbb.snapshots.get(snap.id)
        assert [s.id for s in sb.snapshots()] == [fork2.record.forked_from.snapshot]
        with pytest.raises(sdk.NotFoundError):
            sb.fork(snap.id)
        assert fork.refresh().status == "running"
        carries_on(fork, fst, "the fork after its snapshot was deleted")
    finally:
        for f in forks:
            f.delete()
        sb.delete()
    # A sandbox's snapshots go with it.
    with pytest.raises(sdk.NotFoundError):
        lbb.snapshots.get(fork2.record.forked_from.snapshot)


@needs_gvisor
def test_gvisor_fork_idempotency_key(lbb: LbbClient) -> None:
    with gvisor_sandbox(lbb) as sb:
        snap = sb.snapshot()
        k = "fork-" + uuid.uuid4().hex
        a = sb.fork(snap.id, idempotency_key=k)
        try:
            b = sb.fork(snap.id, idempotency_key=k)
            assert a.id == b.id, "a retry with the same key answers the same fork"
            with pytest.raises(sdk.IdempotencyConflictError):
                sb.fork(snap.id, metadata={"other": "request"}, idempotency_key=k)
        finally:
            a.delete()


@needs_gvisor
def test_gvisor_async_client(server: Any) -> None:
    async def main() -> None:
        async with sdk.AsyncLbbClient(server.url, api_key=server.key, graph="main") as c:
            async with await c.sandboxes.create(isolation="gvisor", expires_in_seconds=300) as sb:
                assert sb.record.isolation == "gvisor"
                await sb.files.write("a.txt", "before")
                p = await sb.pause()
                assert p.status == "paused" and p.paused_at and sb.status == "paused"
                assert (await sb.resume()).status == "running"
                snap = await sb.snapshot(metadata={"k": "v"})
                assert snap.memory and snap.sandbox == sb.id and snap.metadata == {"k": "v"}
                await sb.files.write("a.txt", "after")
                async with await sb.fork(snapshot=snap.id, expires_in_seconds=120) as fork:
                    assert isinstance(fork, sdk.AsyncSandbox) and fork.record.forked_from.snapshot == snap.id
                    assert await fork.files.read_text("a.txt") == "before"
                    assert (await sb.files.read_text("a.txt")) == "after"
                assert [s.id for s in await sb.snapshots()] == [snap.id]
                assert (await c.snapshots.get(snap.id)).id == snap.id
                assert (await c.snapshots.delete(snap.id)).id == snap.id
                with pytest.raises(sdk.NotFoundError):
                    await c.snapshots.get(snap.id)
            async with await c.sandboxes.create(isolation="ns") as ns:
                with pytest.raises(sdk.NotSupportedError) as ei:
                    await ns.snapshot()
                assert ei.value.status == 409 and ei.value.code == "not_supported"

    asyncio.run(main())


def test_openapi_has_the_snapshot_routes(lbb: LbbClient) -> None:
    paths = lbb.openapi().get("paths", {})
    used = [
        ("post", "/v1/sandboxes/{id}/pause"), ("post", "/v1/sandboxes/{id}/resume"), ("post", "/v1/sandboxes/{id}/snapshot"),
        ("get", "/v1/sandboxes/{id}/snapshots"), ("post", "/v1/sandboxes/{id}/fork"),
        ("get", "/v1/snapshots/{id}"), ("delete", "/v1/snapshots/{id}"),
    ]
    missing = [f"{m.upper()} {p}" for m, p in used if m not in paths.get(p, {})]
    assert not missing, f"routes the SDK calls that /v1/openapi.json does not have: {missing}"

