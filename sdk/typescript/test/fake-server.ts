/**
 * A tiny scripted HTTP server for the unit tests: it records every request and answers with
 * whatever the test's handler returns. Not a fake of lbb: each test says what the server does.
 */

import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";

export interface Seen {
  method: string;
  path: string;
  query: Record<string, string>;
  headers: Record<string, string>;
  body: Buffer;
  json(): any;
}

export interface Reply {
  status?: number;
  body?: unknown;
  headers?: Record<string, string>;
  /** Drop the connection without answering. */
  drop?: boolean;
  /** Promise more bytes (Content-Length) than the body has, send the body, then break the connection. */
  truncate?: boolean;
  /** Write these pieces of an event stream; null breaks the connection there. */
  stream?: (string | null)[];
}

export type Handler = (seen: Seen, nth: number) => Reply;

export class FakeServer {
  readonly seen: Seen[] = [];
  url = "";
  private server: Server;

  constructor(private readonly handler: Handler) {
    this.server = createServer((req, res) => void this.serve(req, res));
  }

  async start(): Promise<this> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  requests(method: string, path: string): Seen[] {
    return this.seen.filter((s) => s.method === method && s.path === path);
  }

  private async serve(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const u = new URL(req.url ?? "/", "http://x");
    const body = Buffer.concat(chunks);
    const seen: Seen = {
      method: req.method ?? "",
      path: u.pathname,
      query: Object.fromEntries(u.searchParams),
      headers: Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, String(v)])),
      body,
      json: () => JSON.parse(body.toString("utf8")),
    };
    this.seen.push(seen);
    const nth = this.requests(seen.method, seen.path).length;
    let reply: Reply;
    try {
      reply = this.handler(seen, nth);
    } catch (e) {
      reply = { status: 500, body: { error: { code: "internal", message: String(e), request_id: "req_fake" } } };
    }
    if (reply.drop) {
      req.socket.destroy();
      return;
    }
    if (reply.stream) {
      res.writeHead(reply.status ?? 200, { "Content-Type": "text/event-stream", ...reply.headers });
      for (const piece of reply.stream) {
        if (piece === null) {
          req.socket.destroy();
          return;
        }
        res.write(piece);
        await new Promise((r) => setTimeout(r, 5));
      }
      res.end();
      return;
    }
    let data: Buffer;
    let ctype = "application/octet-stream";
    if (reply.body === undefined) data = Buffer.alloc(0);
    else if (typeof reply.body === "string") data = Buffer.from(reply.body);
    else if (Buffer.isBuffer(reply.body)) data = reply.body;
    else {
      data = Buffer.from(JSON.stringify(reply.body));
      ctype = "application/json";
    }
    if (reply.truncate) {
      res.writeHead(reply.status ?? 200, { "Content-Type": ctype, "Content-Length": String(data.length + 10), ...reply.headers });
      res.write(data);
      await new Promise((r) => setTimeout(r, 20));
      req.socket.destroy();
      return;
    }
    res.writeHead(reply.status ?? 200, { "Content-Type": ctype, "Content-Length": String(data.length), ...reply.headers });
    res.end(data);
  }
}

export function error(status: number, code: string, message = code, requestId = "req_test"): Reply {
  return { status, body: { error: { code, message, request_id: requestId } } };
}

export const RUN_OK = {
  ok: true,
  result: 6,
  command: "cmd_01test",
  sandbox: "sbx_01test",
  status: "succeeded",
  exit_code: 0,
  duration_ms: 9,
  stdout: { head: "hi\n", tail: "", bytes: 3 },
  stderr: { head: "", tail: "", bytes: 0 },
};

export async function withServer<T>(handler: Handler, fn: (srv: FakeServer) => Promise<T>): Promise<T> {
  const srv = await new FakeServer(handler).start();
  try {
    return await fn(srv);
  } finally {
    await srv.close();
  }
}
