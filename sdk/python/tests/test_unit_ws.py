"""The terminals' WebSocket framing: masked client frames, fragments, control frames between
them, and input fed in any pieces."""

from __future__ import annotations

import struct

import pytest
from lbb import _ws
from lbb._errors import APIConnectionError


def server_frame(op: int, payload: bytes, fin: bool = True) -> bytes:
    n = len(payload)
    head = bytes([(0x80 if fin else 0) | op])
    if n < 126:
        head += bytes([n])
    elif n < 1 << 16:
        head += bytes([126]) + struct.pack("!H", n)
    else:
        head += bytes([127]) + struct.pack("!Q", n)
    return head + payload


@pytest.mark.parametrize("n", [0, 5, 125, 126, 65535, 65536])
def test_client_frame_is_masked(n: int) -> None:
    payload = bytes(range(256)) * (n // 256 + 1)
    payload = payload[:n]
    f = _ws.frame(_ws.BINARY, payload)
    assert f[0] == 0x82 and f[1] & 0x80
    d = _ws.Decoder()
    d.feed(f)
    assert d.next() == (_ws.BINARY, payload)


def test_fragments_and_pieces() -> None:
    wire = server_frame(_ws.TEXT, b"he", fin=False) + server_frame(_ws.PING, b"p") + server_frame(0, b"llo") + server_frame(_ws.BINARY, b"x" * 300)
    d = _ws.Decoder()
    got = []
    for i in range(len(wire)):  # a byte at a time
        d.feed(wire[i : i + 1])
        m = d.next()
        if m is not None:
            got.append(m)
    assert got == [(_ws.PING, b"p"), (_ws.TEXT, b"hello"), (_ws.BINARY, b"x" * 300)]


def test_bad_frames() -> None:
    d = _ws.Decoder()
    d.feed(server_frame(0, b"stray"))
    with pytest.raises(APIConnectionError):
        d.next()
    d = _ws.Decoder()
    d.feed(bytes([0x82, 127]) + struct.pack("!Q", 1 << 30))
    with pytest.raises(APIConnectionError):
        d.next()
