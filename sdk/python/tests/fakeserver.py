"""A tiny scripted HTTP server for the unit tests: it records every request and answers with
whatever the test's handler returns. Not a fake of lbb: each test says what the server does."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Dict, Iterable, List, Optional, Union
from urllib.parse import parse_qs, urlsplit


@dataclass
class Seen:
    method: str
    path: str
    query: Dict[str, str]
    headers: Dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass
class Reply:
    status: int = 200
    body: Union[bytes, str, Any] = b""
    headers: Dict[str, str] = field(default_factory=dict)
    # Drop the connection without answering (a connection error for the client).
    drop: bool = False
    # Promise more bytes (Content-Length) than the body has, send the body, then drop the connection.
    truncate: bool = False
    # Lines sent one by one for a streamed answer (server-sent events), then the connection closes.
    stream: Optional[Iterable[Optional[str]]] = None


Handler = Callable[[Seen, int], Reply]


class FakeServer:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.seen: List[Seen] = []
        self._lock = threading.Lock()
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                u = urlsplit(self.path)
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    body = _read_chunked(self.rfile)
                seen = Seen(
                    self.command,
                    u.path,
                    {k: v[0] for k, v in parse_qs(u.query, keep_blank_values=True).items()},
                    {k.lower(): v for k, v in self.headers.items()},
                    body,
                )
                with outer._lock:
                    outer.seen.append(seen)
                    nth = sum(1 for s in outer.seen if s.method == seen.method and s.path == seen.path)
                reply = outer.handler(seen, nth)
                if reply.drop:
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return
                if reply.stream is not None:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    for line in reply.stream:
                        if line is None:  # break the connection mid-stream
                            self.close_connection = True
                            self.connection.shutdown(2)
                            return
                        b = line.encode()
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(b), b))
                        self.wfile.flush()
                    self.wfile.write(b"0\r\n\r\n")
                    return
                data = reply.body
                ctype = "application/octet-stream"
                if not isinstance(data, (bytes, str)):
                    data = json.dumps(data).encode()
                    ctype = "application/json"
                elif isinstance(data, str):
                    data = data.encode()
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.headers.pop("Content-Type", ctype))
                self.send_header("Content-Length", str(len(data) + (10 if reply.truncate else 0)))
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
                if reply.truncate:
                    self.wfile.flush()
                    self.close_connection = True
                    self.connection.shutdown(2)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> "FakeServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def requests(self, method: str, path: str) -> List[Seen]:
        return [s for s in self.seen if s.method == method and s.path == path]


def _read_chunked(rfile: Any) -> bytes:
    out = b""
    while True:
        size = int(rfile.readline().strip(), 16)
        if size == 0:
            rfile.readline()
            return out
        out += rfile.read(size)
        rfile.readline()


def error(status: int, code: str, message: str = "", request_id: str = "req_test") -> Reply:
    return Reply(status, {"error": {"code": code, "message": message or code, "request_id": request_id}})


RUN_OK: Dict[str, Any] = {
    "ok": True,
    "result": 6,
    "command": "cmd_01test",
    "sandbox": "sbx_01test",
    "status": "succeeded",
    "exit_code": 0,
    "duration_ms": 9,
    "stdout": {"head": "hi\n", "tail": "", "bytes": 3},
    "stderr": {"head": "", "tail": "", "bytes": 0},
}
