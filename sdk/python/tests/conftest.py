"""The test harness: a real `lbb serve` of our own, with the real driver.

The `server` fixture starts `$LBB_BIN serve` (default: bin/lbb of this repository) on a free
port with a fresh data directory, reads the admin key it saves, and stops it by its pid at the
end. The base image comes from `$LBB_IMAGES_DIR`, else `$LBB_DATA_DIR/images`, else
/var/lib/lbb/images, where `make images` builds it. The ns driver needs root: when not root the
server tests skip and say so. With LBB_TEST_URL (and LBB_TEST_API_KEY) set, the tests use that
server instead of starting one.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Iterator

import httpx
import pytest

import lbb as lbb_sdk

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


@dataclass
class Server:
    url: str
    key: str
    data_dir: str
    log_path: str

    def log_tail(self, n: int = 40) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return "".join(f.readlines()[-n:])
        except OSError:
            return ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _images_dir() -> str:
    return os.environ.get("LBB_IMAGES_DIR") or os.path.join(os.environ.get("LBB_DATA_DIR") or "/var/lib/lbb", "images")


@pytest.fixture(scope="session")
def server() -> Iterator[Server]:
    if os.environ.get("LBB_TEST_URL"):
        yield Server(os.environ["LBB_TEST_URL"].rstrip("/"), os.environ.get("LBB_TEST_API_KEY", ""), "", "")
        return
    if os.geteuid() != 0:
        pytest.skip("RequiresRoot: the server tests run a real `lbb serve` with the ns driver, which needs root")
    binary = os.environ.get("LBB_BIN") or os.path.join(REPO, "bin", "lbb")
    if not os.access(binary, os.X_OK):
        pytest.fail(f"no lbb binary at {binary}: run `make build` or set LBB_BIN")
    data_dir = tempfile.mkdtemp(prefix="lbb-sdk-py-")
    # The sandbox's user namespace must be able to reach its layer under the data directory.
    os.chmod(data_dir, 0o755)
    addr = f"127.0.0.1:{_free_port()}"
    log_path = os.path.join(data_dir, "server.log")
    log = open(log_path, "wb")
    env = dict(os.environ)
    for k in ("LBB_ADDR", "LBB_DATA_DIR", "LBB_URL", "LBB_API_KEY"):
        env.pop(k, None)
    proc = subprocess.Popen(
        [binary, "serve", "--addr", addr, "--preview-addr", "127.0.0.1:0", "--data-dir", data_dir, "--images-dir", _images_dir(), "--shutdown-grace", "5s"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
    )
    srv = Server(f"http://{addr}", "", data_dir, log_path)
    try:
        deadline = time.monotonic() + float(os.environ.get("LBB_TEST_START_TIMEOUT", "300"))
        key_path = os.path.join(data_dir, "admin.key")
        while True:
            if proc.poll() is not None:
                pytest.fail(f"lbb serve exited with {proc.returncode} before serving:\n{srv.log_tail()}")
            if time.monotonic() > deadline:
                pytest.fail(f"lbb serve did not come up on {addr}:\n{srv.log_tail()}")
            if os.path.exists(key_path):
                try:
                    if httpx.get(srv.url + "/healthz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
            time.sleep(0.1)
        with open(key_path, encoding="utf-8") as f:
            srv.key = f.read().strip()
        yield srv
    finally:
        # Stop our server by its pid; kill it if it does not stop in time.
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
        if os.environ.get("LBB_TEST_KEEP"):
            print(f"\nlbb test server data kept in {data_dir}")
        else:
            shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture
def server_env(server: Server, monkeypatch: pytest.MonkeyPatch) -> Server:
    """The environment the seed's samples read: ENDPOINT_URL and API_KEY."""
    monkeypatch.setenv("ENDPOINT_URL", server.url)
    monkeypatch.setenv("API_KEY", server.key)
    return server


@pytest.fixture
def lbb(server: Server) -> Iterator[lbb_sdk.LbbClient]:
    c = lbb_sdk.LbbClient(server.url, api_key=server.key, graph="main")
    yield c
    c.close()


def pytest_runtest_makereport(item, call):  # type: ignore[no-untyped-def]
    """On a failing server test, show the end of the server's log."""
    if call.when == "call" and call.excinfo is not None and "server" in getattr(item, "fixturenames", ()):
        srv = item.funcargs.get("server")
        if isinstance(srv, Server) and srv.log_path:
            item.add_report_section("call", "lbb serve log (tail)", srv.log_tail(12))
