/**
 * Terminals in a sandbox over a WebSocket (`GET /v1/sandboxes/{id}/pty`): `sandbox.pty`.
 *
 * Node 20 has no WebSocket client of its own and the SDK takes no runtime dependency, so the
 * protocol (RFC 6455) is spoken here on node:http's upgrade: the opening handshake, masked
 * client frames, fragments, ping/pong and the closing handshake.
 */

import { createHash, randomBytes } from "node:crypto";
import * as http from "node:http";
import * as https from "node:https";
import type { Duplex } from "node:stream";

import { APIConnectionError, APITimeoutError, LbbError, errorFromBody } from "./errors.js";

const CONT = 0x0;
const TEXT = 0x1;
const BINARY = 0x2;
const CLOSE = 0x8;
const PING = 0x9;
const PONG = 0xa;
const GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
/** The largest message read: the server's terminal chunks are 32 KiB. */
const MAX_MESSAGE = 1 << 20;
/** Messages queued unread before the socket is paused (the server then waits). */
const HIGH_WATER = 64;

type Message = { op: number; data: Buffer };

/** One final client frame, masked as a client must mask. */
export function wsFrame(op: number, payload: Uint8Array): Buffer {
  const n = payload.length;
  const head = n < 126 ? 2 : n < 65536 ? 4 : 10;
  const f = Buffer.alloc(head + 4 + n);
  f[0] = 0x80 | op;
  if (n < 126) f[1] = 0x80 | n;
  else if (n < 65536) {
    f[1] = 0x80 | 126;
    f.writeUInt16BE(n, 2);
  } else {
    f[1] = 0x80 | 127;
    f.writeBigUInt64BE(BigInt(n), 2);
  }
  const mask = randomBytes(4);
  mask.copy(f, head);
  for (let i = 0; i < n; i++) f[head + 4 + i] = payload[i]! ^ mask[i & 3]!;
  return f;
}

/**
 * Splits the bytes read into messages: control frames as they come, data frames joined from
 * their fragments. Fed in any pieces.
 */
export class WsDecoder {
  private buf = Buffer.alloc(0);
  private fragOp: number | undefined;
  private frags: Buffer[] = [];
  private fragLen = 0;

  feed(b: Uint8Array): void {
    this.buf = this.buf.length ? Buffer.concat([this.buf, b]) : Buffer.from(b);
  }

  next(): Message | undefined {
    for (;;) {
      const f = this.frame();
      if (!f) return undefined;
      const { fin, op, data } = f;
      if (op >= 0x8) {
        if (!fin || data.length > 125) throw protocolError("a bad control frame");
        return { op, data };
      }
      if (op === CONT) {
        if (this.fragOp === undefined) throw protocolError("a continuation with nothing to continue");
      } else if (this.fragOp !== undefined) {
        throw protocolError("a new message inside a fragmented one");
      } else if (fin) {
        return { op, data };
      } else {
        this.fragOp = op;
      }
      this.frags.push(data);
      this.fragLen += data.length;
      if (this.fragLen > MAX_MESSAGE) throw protocolError("a message over 1 MiB");
      if (fin) {
        const m = { op: this.fragOp!, data: Buffer.concat(this.frags) };
        this.fragOp = undefined;
        this.frags = [];
        this.fragLen = 0;
        return m;
      }
    }
  }

  private frame(): { fin: boolean; op: number; data: Buffer } | undefined {
    const b = this.buf;
    if (b.length < 2) return undefined;
    if (b[0]! & 0x70) throw protocolError("reserved bits set");
    const fin = (b[0]! & 0x80) !== 0;
    const op = b[0]! & 0x0f;
    const masked = (b[1]! & 0x80) !== 0;
    let n = b[1]! & 0x7f;
    let i = 2;
    if (n === 126) {
      if (b.length < 4) return undefined;
      n = b.readUInt16BE(2);
      i = 4;
    } else if (n === 127) {
      if (b.length < 10) return undefined;
      const big = b.readBigUInt64BE(2);
      if (big > BigInt(MAX_MESSAGE)) throw protocolError("a frame over 1 MiB");
      n = Number(big);
      i = 10;
    }
    if (n > MAX_MESSAGE) throw protocolError("a frame over 1 MiB");
    let mask: Buffer | undefined;
    if (masked) {
      if (b.length < i + 4) return undefined;
      mask = b.subarray(i, i + 4);
      i += 4;
    }
    if (b.length < i + n) return undefined;
    const data = Buffer.from(b.subarray(i, i + n));
    if (mask) for (let j = 0; j < n; j++) data[j] = data[j]! ^ mask[j & 3]!;
    this.buf = b.subarray(i + n);
    return { fin, op, data };
  }
}

function protocolError(what: string): APIConnectionError {
  return new APIConnectionError(`websocket: ${what}`, { code: "connection_error" });
}

/** The closing handshake: its code (1005 when none was given, 1006 when the connection dropped) and reason. */
export class WsClosed extends Error {
  constructor(
    readonly closeCode: number,
    readonly reason: string,
  ) {
    super(`websocket closed: ${closeCode} ${reason}`.trim());
  }
}

/** A WebSocket client connection on a node:http upgrade. */
export class WsConn {
  private readonly dec = new WsDecoder();
  private readonly queue: Message[] = [];
  private waiter: (() => void) | undefined;
  private closed: WsClosed | undefined;
  private sentClose = false;

  private constructor(private readonly sock: Duplex) {
    sock.on("data", (b: Buffer) => this.onData(b));
    sock.on("close", () => this.onEnd(new WsClosed(1006, "the connection dropped")));
    sock.on("error", () => this.onEnd(new WsClosed(1006, "the connection broke")));
  }

  static open(url: string, headers: Record<string, string>, timeoutMs: number, signal?: AbortSignal): Promise<WsConn> {
    const key = randomBytes(16).toString("base64");
    const u = new URL(url);
    const mod = u.protocol === "https:" || u.protocol === "wss:" ? https : http;
    return new Promise<WsConn>((resolve, reject) => {
      const req = mod.request(u.toString().replace(/^ws/, "http"), {
        headers: { ...headers, Connection: "Upgrade", Upgrade: "websocket", "Sec-WebSocket-Key": key, "Sec-WebSocket-Version": "13" },
        signal,
      });
      const timer = setTimeout(() => {
        req.destroy();
        reject(new APITimeoutError(`websocket ${u.pathname}: no answer in ${timeoutMs} ms`, { code: "connection_error" }));
      }, timeoutMs);
      req.on("upgrade", (res, sock, head) => {
        clearTimeout(timer);
        const want = createHash("sha1").update(key + GUID).digest("base64");
        if (String(res.headers.upgrade).toLowerCase() !== "websocket" || res.headers["sec-websocket-accept"] !== want) {
          sock.destroy();
          reject(protocolError("the server did not accept the upgrade"));
          return;
        }
        const c = new WsConn(sock);
        if (head.length) c.onData(head);
        resolve(c);
      });
      req.on("response", (res) => {
        const parts: Buffer[] = [];
        res.on("data", (b: Buffer) => parts.push(b));
        res.on("end", () => {
          clearTimeout(timer);
          reject(errorFromBody(res.statusCode ?? 500, Buffer.concat(parts).toString("utf8"), res.headers["request-id"] as string | undefined));
        });
      });
      req.on("error", (e) => {
        clearTimeout(timer);
        reject(new APIConnectionError(`websocket ${u.pathname}: ${e.message}`, { code: "connection_error", cause: e }));
      });
      req.end();
    });
  }

  private onData(b: Buffer): void {
    try {
      this.dec.feed(b);
      for (let m = this.dec.next(); m; m = this.dec.next()) {
        if (m.op === PING) this.write(PONG, m.data);
        else if (m.op === CLOSE) {
          const code = m.data.length >= 2 ? m.data.readUInt16BE(0) : 1005;
          if (!this.sentClose) {
            this.sentClose = true;
            this.write(CLOSE, m.data.subarray(0, 2));
          }
          this.onEnd(new WsClosed(code, m.data.subarray(2).toString("utf8")));
          this.sock.end();
        } else if (m.op === TEXT || m.op === BINARY) {
          this.queue.push(m);
          if (this.queue.length >= HIGH_WATER) this.sock.pause();
        }
      }
    } catch (e) {
      this.onEnd(new WsClosed(1002, e instanceof Error ? e.message : String(e)));
      this.sock.destroy();
    }
    this.wake();
  }

  private onEnd(c: WsClosed): void {
    this.closed ??= c;
    this.wake();
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = undefined;
    w?.();
  }

  private write(op: number, data: Uint8Array): void {
    if (!this.sock.destroyed && this.sock.writable) this.sock.write(wsFrame(op, data));
  }

  /** Sends a data message; throws when the connection has closed. */
  send(op: number, data: Uint8Array): void {
    if (this.closed || this.sentClose) throw new APIConnectionError(`websocket: closed`, { code: "connection_error" });
    this.write(op, data);
  }

  /**
   * The next data message; throws WsClosed once the connection has closed (after the
   * messages that came before), and a TimeoutError when none came in `timeoutMs`.
   */
  async recv(timeoutMs?: number): Promise<Message> {
    const deadline = timeoutMs === undefined ? undefined : Date.now() + timeoutMs;
    for (;;) {
      const m = this.queue.shift();
      if (m) {
        if (this.queue.length < HIGH_WATER / 2 && this.sock.isPaused()) this.sock.resume();
        return m;
      }
      if (this.closed) throw this.closed;
      const left = deadline === undefined ? undefined : deadline - Date.now();
      if (left !== undefined && left <= 0) {
        const e = new Error("no terminal output in time");
        e.name = "TimeoutError";
        throw e;
      }
      await new Promise<void>((resolve) => {
        const t = left === undefined ? undefined : setTimeout(resolve, left);
        this.waiter = () => {
          if (t) clearTimeout(t);
          resolve();
        };
      });
    }
  }

  /** Starts the closing handshake, waits a moment for the answer, and closes. */
  async close(code = 1000, reason = ""): Promise<void> {
    if (!this.closed && !this.sentClose) {
      this.sentClose = true;
      const r = Buffer.from(reason, "utf8").subarray(0, 123);
      const p = Buffer.alloc(2 + r.length);
      p.writeUInt16BE(code, 0);
      r.copy(p, 2);
      this.write(CLOSE, p);
      const deadline = Date.now() + 2000;
      while (!this.closed && Date.now() < deadline) {
        try {
          await this.recv(deadline - Date.now());
        } catch {
          break;
        }
      }
    }
    this.sock.destroy();
  }
}

/** How a terminal ended: the server's last message. */
export interface TerminalExit {
  terminal: string;
  /** The exit status (128+n for signal n); undefined when it has none (the sandbox went away). */
  exitCode: number | undefined;
  /** The signal that ended it, when one did (SIGHUP after the grace period with no socket). */
  signal?: string;
  /** The record's status: exited, failed, killed, … */
  status?: string;
  error?: string;
}

/** Opens a terminal: `sandbox.pty.create(…)`. */
export interface CreateTerminalParams {
  /** What runs on the terminal; default a login shell. */
  argv?: string[];
  cwd?: string;
  env?: Record<string, string>;
  /** Its size; default 80×24. */
  cols?: number;
  rows?: number;
  /** Its TERM; default xterm-256color. */
  term?: string;
  /** Called with each chunk of output as it comes; then `wait()` answers the exit code (and `read` is not for you). */
  onData?: (data: Uint8Array) => void | Promise<void>;
  /** How long to wait for the connection (default the client's timeout). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** Re-attaches: `sandbox.pty.attach(id, …)`. */
export type AttachTerminalParams = Pick<CreateTerminalParams, "cols" | "rows" | "onData" | "timeoutMs" | "signal">;

/** What the terminals need of the client's transport. */
export interface TerminalDialer {
  readonly timeoutMs: number;
  terminalUrl(sandboxId: string, query: [string, string][]): string;
  authHeaders(): Promise<Record<string, string>>;
}

/**
 * A terminal in a sandbox, attached over a WebSocket. `send` what is typed ("\x03" is
 * Ctrl-C), `resize` it, and read its output with `read`, by iterating
 * (`for await (const chunk of term)`, ending when the terminal does), or through `onData`
 * with `wait()`. `exitCode` is its exit status once it has ended. `close` detaches: the
 * terminal lives on for the server's grace period (two minutes by default), in which
 * `sandbox.pty.attach(term.id)` re-attaches and first reads its recent output.
 */
export class Terminal implements AsyncIterable<Uint8Array> {
  /** The terminal's command id (`cmd_…`, kind terminal): its record. */
  readonly id: string;
  /** How it ended, once it has. */
  exit: TerminalExit | undefined;
  private pump: Promise<number | undefined> | undefined;

  constructor(
    private readonly conn: WsConn,
    readonly sandboxId: string,
    started: { terminal?: string },
    onData?: (data: Uint8Array) => void | Promise<void>,
  ) {
    this.id = started.terminal ?? "";
    if (onData) {
      this.pump = this.drain(onData);
      this.pump.catch(() => {}); // seen by wait()
    }
  }

  /** The exit status once the terminal has ended, else undefined. */
  get exitCode(): number | undefined {
    return this.exit?.exitCode;
  }

  /** Types `data` (a string is sent as UTF-8). */
  send(data: string | Uint8Array): void {
    const b = typeof data === "string" ? Buffer.from(data, "utf8") : data;
    if (b.length) this.conn.send(BINARY, b);
  }

  /** Sets the terminal's size; its foreground program gets SIGWINCH. */
  resize(cols: number, rows: number): void {
    if (!(cols > 0 && cols <= 65535 && rows > 0 && rows <= 65535)) throw new LbbError("cols and rows must be from 1 to 65535");
    this.conn.send(TEXT, Buffer.from(JSON.stringify({ type: "resize", cols: Math.trunc(cols), rows: Math.trunc(rows) })));
  }

  /**
   * The next chunk of output; null once the terminal has ended (`exitCode` says how).
   * Throws a TimeoutError when nothing came in `timeoutMs` (nothing is lost: read again), an
   * APIConnectionError when the connection dropped before the end.
   */
  async read(timeoutMs?: number): Promise<Uint8Array | null> {
    for (;;) {
      let m: Message;
      try {
        m = await this.conn.recv(timeoutMs);
      } catch (e) {
        if (!(e instanceof WsClosed)) throw e;
        if (this.exit) return null;
        throw new APIConnectionError(`terminal ${this.id}: the connection closed (${e.closeCode} ${e.reason})`, { code: "connection_error", cause: e });
      }
      if (m.op === BINARY) return new Uint8Array(m.data.buffer, m.data.byteOffset, m.data.length);
      try {
        const j = JSON.parse(m.data.toString("utf8")) as { type?: string; terminal?: string; exit_code?: number; signal?: string; status?: string; error?: string };
        if (j && j.type === "exit") this.exit = { terminal: j.terminal ?? this.id, exitCode: j.exit_code, signal: j.signal, status: j.status, error: j.error };
      } catch {
        // not JSON: ignored
      }
    }
  }

  private async drain(onData: (data: Uint8Array) => void | Promise<void>): Promise<number | undefined> {
    for (let b = await this.read(); b; b = await this.read()) await onData(b);
    return this.exitCode;
  }

  /**
   * Waits for the terminal's end and answers its exit status: with the `onData` given to
   * create/attach, or here, each chunk of output goes to it; without, the output is read and
   * dropped.
   */
  async wait(o: { onData?: (data: Uint8Array) => void | Promise<void> } = {}): Promise<number | undefined> {
    this.pump ??= this.drain(o.onData ?? (() => {}));
    return this.pump;
  }

  /** Detaches; the terminal runs on for the server's grace period. */
  async close(): Promise<void> {
    await this.conn.close(1000, "detached");
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Uint8Array> {
    for (let b = await this.read(); b; b = await this.read()) yield b;
  }
}

/** A sandbox's terminals (`sandbox.pty`): create one, or attach to one still running by its id. */
export class SandboxPty {
  constructor(
    private readonly t: TerminalDialer,
    private readonly sandboxId: string,
  ) {}

  /**
   * Opens a terminal on a real pty: `argv` (default a login shell) in `cwd` with `env`,
   * `cols`×`rows` (default 80×24). It is a command record of kind terminal (`term.id`).
   */
  create(p: CreateTerminalParams = {}): Promise<Terminal> {
    const q: [string, string][] = (p.argv ?? []).map((a) => ["argv", a]);
    for (const [k, v] of Object.entries(p.env ?? {})) q.push(["env", `${k}=${v}`]);
    if (p.cwd) q.push(["cwd", p.cwd]);
    if (p.term) q.push(["term", p.term]);
    return this.dial(q, p);
  }

  /**
   * Re-attaches to a running terminal (resizing it when cols and rows are given); its recent
   * output (what the server keeps of its tail, 16 KiB by default) is read first. One that has ended throws ConflictError (its record
   * keeps its output: `sandbox.commands.get(id)`).
   */
  attach(terminalId: string, p: AttachTerminalParams = {}): Promise<Terminal> {
    return this.dial([["terminal", terminalId]], p);
  }

  private async dial(q: [string, string][], p: AttachTerminalParams): Promise<Terminal> {
    if (p.cols && p.rows) q.push(["cols", String(Math.trunc(p.cols))], ["rows", String(Math.trunc(p.rows))]);
    const timeout = p.timeoutMs ?? this.t.timeoutMs;
    const conn = await WsConn.open(this.t.terminalUrl(this.sandboxId, q), await this.t.authHeaders(), timeout, p.signal);
    let started: { type?: string; terminal?: string } | undefined;
    try {
      const m = await conn.recv(timeout);
      if (m.op === TEXT) started = JSON.parse(m.data.toString("utf8")) as typeof started;
    } catch {
      // below
    }
    if (!started || started.type !== "started") {
      await conn.close();
      throw new APIConnectionError("terminal: no started message", { code: "connection_error" });
    }
    return new Terminal(conn, this.sandboxId, started, p.onData);
  }
}
