"""A small WebSocket client (RFC 6455) for terminals, on the standard library alone.

Debian 12's python3-websockets (10.4) has no synchronous client and the SDK's one dependency
is httpx, so the terminals speak the protocol themselves: the opening handshake, masked client
frames, fragments, ping/pong and the closing handshake. :class:`Conn` is on a blocking socket,
:class:`AsyncConn` on asyncio streams; the framing (:class:`Decoder`, :func:`frame`) is shared.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import socket
import ssl
import struct
from typing import Dict, List, Mapping, Optional, Tuple
from urllib.parse import urlsplit

from ._errors import APIConnectionError, APITimeoutError, error_from_body

CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
# The largest message read: the server's terminal chunks are 32 KiB.
MAX_MESSAGE = 1 << 20
_MAX_HEAD = 64 << 10
_CHUNK = 64 << 10

Message = Tuple[int, bytes]


class Closed(Exception):
    """The connection's closing handshake: ``code`` (1005 when none was given) and ``reason``."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(f"websocket closed: {code} {reason}".strip())
        self.code = code
        self.reason = reason


def frame(opcode: int, payload: bytes) -> bytes:
    """One final client frame, masked as a client must mask."""
    n = len(payload)
    head = bytearray([0x80 | opcode])
    if n < 126:
        head.append(0x80 | n)
    elif n < 1 << 16:
        head.append(0x80 | 126)
        head += struct.pack("!H", n)
    else:
        head.append(0x80 | 127)
        head += struct.pack("!Q", n)
    mask = os.urandom(4)
    head += mask
    return bytes(head) + _mask(payload, mask)


def _mask(payload: bytes, mask: bytes) -> bytes:
    if not payload:
        return b""
    n = len(payload)
    m = int.from_bytes((mask * (n // 4 + 1))[:n], "big")
    return (int.from_bytes(payload, "big") ^ m).to_bytes(n, "big")


def close_payload(code: int, reason: str = "") -> bytes:
    return struct.pack("!H", code) + reason.encode("utf-8")[:123]


class Decoder:
    """Splits the bytes read into messages: control frames as they come, data frames joined
    from their fragments. Fed in any pieces, so a read cut short (a timeout) loses nothing."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self._frag_op: Optional[int] = None
        self._frag: List[bytes] = []
        self._frag_len = 0

    def feed(self, data: bytes) -> None:
        self.buf += data

    def next(self) -> Optional[Message]:
        while True:
            f = self._frame()
            if f is None:
                return None
            fin, op, payload = f
            if op >= 0x8:
                if not fin or len(payload) > 125:
                    raise APIConnectionError("websocket: a bad control frame", code="connection_error")
                return op, payload
            if op == CONT:
                if self._frag_op is None:
                    raise APIConnectionError("websocket: a continuation with nothing to continue", code="connection_error")
            elif self._frag_op is not None:
                raise APIConnectionError("websocket: a new message inside a fragmented one", code="connection_error")
            elif fin:
                return op, payload
            else:
                self._frag_op = op
            self._frag.append(payload)
            self._frag_len += len(payload)
            if self._frag_len > MAX_MESSAGE:
                raise APIConnectionError("websocket: a message over 1 MiB", code="connection_error")
            if fin:
                msg = (self._frag_op, b"".join(self._frag))
                self._frag_op, self._frag, self._frag_len = None, [], 0
                return msg

    def _frame(self) -> Optional[Tuple[bool, int, bytes]]:
        b = self.buf
        if len(b) < 2:
            return None
        fin, op, masked, n = bool(b[0] & 0x80), b[0] & 0x0F, bool(b[1] & 0x80), b[1] & 0x7F
        if b[0] & 0x70:
            raise APIConnectionError("websocket: reserved bits set", code="connection_error")
        i = 2
        if n == 126:
            if len(b) < 4:
                return None
            n, i = struct.unpack_from("!H", b, 2)[0], 4
        elif n == 127:
            if len(b) < 10:
                return None
            n, i = struct.unpack_from("!Q", b, 2)[0], 10
        if n > MAX_MESSAGE:
            raise APIConnectionError("websocket: a frame over 1 MiB", code="connection_error")
        mask = b""
        if masked:  # servers do not mask; accepted all the same
            if len(b) < i + 4:
                return None
            mask, i = bytes(b[i : i + 4]), i + 4
        if len(b) < i + n:
            return None
        payload = bytes(b[i : i + n])
        del b[: i + n]
        return fin, op, _mask(payload, mask) if mask else payload


def _handshake(url: str, headers: Mapping[str, str]) -> Tuple[str, int, bool, bytes, bytes]:
    u = urlsplit(url)
    tls = u.scheme in ("https", "wss")
    host = u.hostname or "127.0.0.1"
    port = u.port or (443 if tls else 80)
    key = base64.b64encode(os.urandom(16))
    target = (u.path or "/") + ("?" + u.query if u.query else "")
    hosthdr = u.netloc.rsplit("@", 1)[-1]
    lines = [
        f"GET {target} HTTP/1.1",
        f"Host: {hosthdr}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key.decode()}",
        "Sec-WebSocket-Version: 13",
    ]
    for k, v in headers.items():
        if k.lower() not in ("host", "upgrade", "connection", "accept"):
            lines.append(f"{k}: {v}")
    return host, port, tls, ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8"), key


def _parse_head(head: bytes) -> Tuple[int, Dict[str, str]]:
    lines = head.decode("iso-8859-1").split("\r\n")
    try:
        status = int(lines[0].split(" ", 2)[1])
    except (IndexError, ValueError):
        raise APIConnectionError(f"websocket: a bad answer {lines[0]!r}", code="connection_error") from None
    hdrs: Dict[str, str] = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        if k:
            hdrs[k.strip().lower()] = v.strip()
    return status, hdrs


def _check_accept(hdrs: Mapping[str, str], key: bytes) -> None:
    want = base64.b64encode(hashlib.sha1(key + _GUID).digest()).decode()
    if hdrs.get("upgrade", "").lower() != "websocket" or hdrs.get("sec-websocket-accept") != want:
        raise APIConnectionError("websocket: the server did not accept the upgrade", code="connection_error")


class _Base:
    closed: Optional[Closed] = None
    _sent_close = False

    def _control(self, op: int, payload: bytes) -> Optional[Tuple[int, Optional[bytes]]]:
        """None for a data message; else the frame to answer a control frame with (the
        payload None when there is none to send), noting a close."""
        if op == PING:
            return PONG, payload
        if op == CLOSE:
            code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
            self.closed = Closed(code, payload[2:].decode("utf-8", "replace"))
            if not self._sent_close:
                self._sent_close = True
                return CLOSE, payload[:2]
            return CLOSE, None
        if op in (TEXT, BINARY):
            return None
        return PONG, None  # a pong: nothing to do


class Conn(_Base):
    """A WebSocket client connection on a blocking socket."""

    def __init__(self, sock: socket.socket, dec: Decoder) -> None:
        self.sock = sock
        self.dec = dec

    @classmethod
    def open(cls, url: str, headers: Mapping[str, str], timeout: float) -> "Conn":
        host, port, tls, req, key = _handshake(url, headers)
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
            if tls:
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
            sock.sendall(req)
            buf = b""
            while b"\r\n\r\n" not in buf:
                chunk = sock.recv(_CHUNK)
                if not chunk or len(buf) > _MAX_HEAD:
                    raise APIConnectionError("websocket: the server closed during the handshake", code="connection_error")
                buf += chunk
            head, _, rest = buf.partition(b"\r\n\r\n")
            status, hdrs = _parse_head(head)
            if status != 101:
                body = rest
                want = int(hdrs.get("content-length", "0") or 0)
                while len(body) < min(want, _MAX_HEAD):
                    chunk = sock.recv(_CHUNK)
                    if not chunk:
                        break
                    body += chunk
                sock.close()
                raise error_from_body(status, body, hdrs)
            _check_accept(hdrs, key)
        except socket.timeout as e:
            raise APITimeoutError(f"websocket {url}: timed out", code="connection_error") from e
        except OSError as e:
            raise APIConnectionError(f"websocket {url}: {type(e).__name__}: {e}", code="connection_error") from e
        dec = Decoder()
        dec.feed(rest)
        return cls(sock, dec)

    def send(self, opcode: int, payload: bytes) -> None:
        try:
            self.sock.settimeout(None)
            self.sock.sendall(frame(opcode, payload))
        except OSError as e:
            raise APIConnectionError(f"websocket: {type(e).__name__}: {e}", code="connection_error") from e

    def recv(self, timeout: Optional[float] = None) -> Message:
        """The next data message (TEXT or BINARY, payload); raises :class:`Closed` at the
        closing handshake and TimeoutError when nothing came in ``timeout`` seconds."""
        while True:
            if self.closed is not None:
                raise self.closed
            m = self.dec.next()
            if m is None:
                try:
                    self.sock.settimeout(timeout)
                    chunk = self.sock.recv(_CHUNK)
                except socket.timeout:
                    raise TimeoutError("no terminal output in time") from None
                except OSError as e:
                    raise APIConnectionError(f"websocket: {type(e).__name__}: {e}", code="connection_error") from e
                if not chunk:
                    self.closed = Closed(1006, "the connection dropped")
                    self._shut()
                    continue
                self.dec.feed(chunk)
                continue
            reply = self._control(*m)
            if reply is None:
                return m
            try:
                if reply[1] is not None:
                    self.send(reply[0], reply[1])
            except APIConnectionError:
                pass
            if self.closed is not None:
                self._shut()

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Starts the closing handshake (waiting a moment for the answer) and closes."""
        if self.closed is None and not self._sent_close:
            self._sent_close = True
            try:
                self.send(CLOSE, close_payload(code, reason))
                while True:
                    self.recv(timeout=2.0)
            except (Closed, TimeoutError, APIConnectionError):
                pass
        self._shut()

    def _shut(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class AsyncConn(_Base):
    """A WebSocket client connection on asyncio streams."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, dec: Decoder) -> None:
        self.reader = reader
        self.writer = writer
        self.dec = dec

    @classmethod
    async def open(cls, url: str, headers: Mapping[str, str], timeout: float) -> "AsyncConn":
        host, port, tls, req, key = _handshake(url, headers)
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=ssl.create_default_context() if tls else None, limit=_MAX_HEAD * 2), timeout
            )
            writer.write(req)
            await writer.drain()
            try:
                buf = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
            except asyncio.IncompleteReadError as e:
                raise APIConnectionError("websocket: the server closed during the handshake", code="connection_error") from e
            status, hdrs = _parse_head(buf[:-4])
            if status != 101:
                want = min(int(hdrs.get("content-length", "0") or 0), _MAX_HEAD)
                try:
                    body = await asyncio.wait_for(reader.readexactly(want), timeout)
                except asyncio.IncompleteReadError as e:
                    body = e.partial
                writer.close()
                raise error_from_body(status, body, hdrs)
            _check_accept(hdrs, key)
        except asyncio.TimeoutError as e:
            raise APITimeoutError(f"websocket {url}: timed out", code="connection_error") from e
        except OSError as e:
            raise APIConnectionError(f"websocket {url}: {type(e).__name__}: {e}", code="connection_error") from e
        return cls(reader, writer, Decoder())

    async def send(self, opcode: int, payload: bytes) -> None:
        try:
            self.writer.write(frame(opcode, payload))
            await self.writer.drain()
        except OSError as e:
            raise APIConnectionError(f"websocket: {type(e).__name__}: {e}", code="connection_error") from e

    async def recv(self, timeout: Optional[float] = None) -> Message:
        """As :meth:`Conn.recv`."""
        while True:
            if self.closed is not None:
                raise self.closed
            m = self.dec.next()
            if m is None:
                try:
                    chunk = await asyncio.wait_for(self.reader.read(_CHUNK), timeout)
                except asyncio.TimeoutError:
                    raise TimeoutError("no terminal output in time") from None
                except OSError as e:
                    raise APIConnectionError(f"websocket: {type(e).__name__}: {e}", code="connection_error") from e
                if not chunk:
                    self.closed = Closed(1006, "the connection dropped")
                    self._shut()
                    continue
                self.dec.feed(chunk)
                continue
            reply = self._control(*m)
            if reply is None:
                return m
            try:
                if reply[1] is not None:
                    await self.send(reply[0], reply[1])
            except APIConnectionError:
                pass
            if self.closed is not None:
                self._shut()

    async def close(self, code: int = 1000, reason: str = "") -> None:
        """As :meth:`Conn.close`."""
        if self.closed is None and not self._sent_close:
            self._sent_close = True
            try:
                await self.send(CLOSE, close_payload(code, reason))
                while True:
                    await self.recv(timeout=2.0)
            except (Closed, TimeoutError, APIConnectionError):
                pass
        self._shut()

    def _shut(self) -> None:
        try:
            self.writer.close()
        except (OSError, RuntimeError):
            pass
