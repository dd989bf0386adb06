/** The terminals' WebSocket framing: masked client frames, fragments, control frames between them, input in any pieces. */

import assert from "node:assert/strict";
import { test } from "node:test";

import { WsDecoder, wsFrame } from "../src/terminal.js";

function serverFrame(op: number, payload: Buffer, fin = true): Buffer {
  const n = payload.length;
  const head = n < 126 ? Buffer.from([(fin ? 0x80 : 0) | op, n]) : Buffer.from([(fin ? 0x80 : 0) | op, 126, n >> 8, n & 0xff]);
  return Buffer.concat([head, payload]);
}

test("client frames are masked and decode back", () => {
  for (const n of [0, 5, 125, 126, 65535, 65536]) {
    const payload = Buffer.alloc(n, 7);
    const f = wsFrame(2, payload);
    assert.equal(f[0], 0x82);
    assert.ok(f[1]! & 0x80);
    const d = new WsDecoder();
    d.feed(f);
    const m = d.next();
    assert.equal(m?.op, 2);
    assert.ok(m?.data.equals(payload));
  }
});

test("fragments with a ping between, fed a byte at a time", () => {
  const wire = Buffer.concat([serverFrame(1, Buffer.from("he"), false), serverFrame(9, Buffer.from("p")), serverFrame(0, Buffer.from("llo")), serverFrame(2, Buffer.alloc(300, 1))]);
  const d = new WsDecoder();
  const got: string[] = [];
  for (let i = 0; i < wire.length; i++) {
    d.feed(wire.subarray(i, i + 1));
    for (let m = d.next(); m; m = d.next()) got.push(`${m.op}:${m.data.length}`);
  }
  assert.deepEqual(got, ["9:1", "1:5", "2:300"]);
  const bad = new WsDecoder();
  bad.feed(serverFrame(0, Buffer.from("stray")));
  assert.throws(() => bad.next());
});
