/** Server-sent events: the output streams of commands (GET /v1/commands/{id}/output). */

/** One event of a stream. */
export interface ServerSentEvent {
  /** Its type: "message" when the server names none. */
  event: string;
  /** Its data, lines joined by newlines. */
  data: string;
  /** The last event id seen; a reconnect sends it back as Last-Event-ID. */
  id?: string;
  retry?: number;
  /** The output text the event carries: data itself, or its data/text/chunk field when data is a JSON object. */
  readonly text: string;
  /** The data parsed as JSON. */
  json(): unknown;
}

function makeEvent(event: string, data: string, id: string | undefined, retry: number | undefined): ServerSentEvent {
  return {
    event,
    data,
    ...(id === undefined ? {} : { id }),
    ...(retry === undefined ? {} : { retry }),
    get text(): string {
      if (!data.startsWith("{")) return data;
      try {
        const v: unknown = JSON.parse(data);
        if (v && typeof v === "object") {
          for (const k of ["data", "text", "chunk"]) {
            const x = (v as Record<string, unknown>)[k];
            if (typeof x === "string") return x;
          }
        }
      } catch {
        // not JSON: the data is the text
      }
      return data;
    },
    json(): unknown {
      return JSON.parse(data);
    },
  };
}

/** Turns the lines of a text/event-stream into events (the WHATWG parsing rules). */
export class SSEDecoder {
  private event = "";
  private data: string[] = [];
  private id: string | undefined;
  private retry: number | undefined;
  lastId: string | undefined;

  /** Takes one line, without its end; answers an event when the line ends one. */
  feed(line: string): ServerSentEvent | undefined {
    if (line.endsWith("\r")) line = line.slice(0, -1);
    if (line === "") {
      if (this.data.length === 0 && !this.event) return undefined;
      const ev = makeEvent(this.event || "message", this.data.join("\n"), this.id, this.retry);
      this.event = "";
      this.data = [];
      this.retry = undefined;
      return ev;
    }
    if (line.startsWith(":")) return undefined;
    const i = line.indexOf(":");
    const field = i < 0 ? line : line.slice(0, i);
    let value = i < 0 ? "" : line.slice(i + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    switch (field) {
      case "event":
        this.event = value;
        break;
      case "data":
        this.data.push(value);
        break;
      case "id":
        if (!value.includes("\0")) {
          this.id = value;
          this.lastId = value;
        }
        break;
      case "retry":
        if (/^\d+$/.test(value)) this.retry = Number(value);
        break;
    }
    return undefined;
  }
}

/** Splits a byte stream into lines (\n, \r\n or \r), decoding UTF-8 across chunk edges. */
export async function* lines(body: AsyncIterable<Uint8Array>): AsyncGenerator<string> {
  const decoder = new TextDecoder();
  let buf = "";
  for await (const chunk of body) {
    buf += decoder.decode(chunk, { stream: true });
    let m: RegExpExecArray | null;
    const re = /\r\n|\n|\r(?!$)/g;
    let start = 0;
    while ((m = re.exec(buf)) !== null) {
      yield buf.slice(start, m.index);
      start = m.index + m[0].length;
    }
    buf = buf.slice(start);
  }
  buf += decoder.decode();
  if (buf.endsWith("\r")) buf = buf.slice(0, -1);
  if (buf) yield buf;
}
