/**
 * The OpenAI-compatible endpoint a rollout executor serves: Node's own HTTP
 * server, bound to loopback unless told otherwise, on a port of its own.
 *
 * Routes: `GET /v1/models` (and `/v1/models/{id}`), `POST /v1/chat/completions`
 * (plain or `stream: true`), and hearth's own `POST /hearth/v1/session/finish`
 * (`{ answer?, reward? }`: an agent elsewhere ends its episode) and
 * `GET /hearth/v1/session` (what the session holds so far).
 *
 * Keys: every request carries `Authorization: Bearer KEY`. The run's key
 * (derived from the app's credential by the driver; the executor keeps only
 * its sha256) serves requests that are recorded nowhere; a session key
 * (`hs_<session>_<secret>`, made when the session opens, one per episode)
 * serves and records that episode. A wrong key is 401, a session that does
 * not exist or has ended 404, an unknown model 404. Bodies past the limit are
 * 413; reading a body, rendering and sampling all have deadlines.
 *
 * Sessions open in leases (one per rollout call): a lease ends when its
 * owner closes it or when its deadline passes, which ends every session of
 * it still open (their requests then get 404) and gives the sessions back.
 */
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import http, { type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { parseChatRequest } from "./chat-request.js";
import { completeInSession, completeUnrecorded, type CompletionContext, type CompletionTiming } from "./completions.js";
import { EndpointError } from "./endpoint-error.js";
import { AgentSession, type SessionEnd, type SessionSpec } from "./session.js";
import { SseReply } from "./sse.js";

/** Where and how the endpoint listens. */
export interface EndpointListen {
  /** Interface to bind (default 127.0.0.1: loopback only). */
  host?: string;
  /** Port (default 0: any free one). */
  port?: number;
  /** sha256 (hex) of the run's key. */
  runKeyHash: string;
  /** Request bodies past this are refused with 413 (default 8 MiB). */
  bodyLimitBytes?: number;
}

/** A lease: sessions opened together, ended together. */
export interface Lease {
  id: string;
  sessions: AgentSession[];
  deadline: number;
  timer: NodeJS.Timeout;
  closed: boolean;
  /** Runs once when the lease closes (the rollout executor's turn goes on). */
  onClose: () => void;
}

/** A session as its opener hands it to an agent. */
export interface OpenedSession {
  id: string;
  apiKey: string;
  itemId: string;
  /** The item's index in its rollout call, and which of its samples this session is. */
  item: number;
  sample: number;
}

const DEFAULT_BODY_LIMIT = 8 * 1024 * 1024;
/** Longest a client may take to send its headers and body. */
const READ_TIMEOUT_MS = 30_000;

function sha256(text: string): string {
  return createHash("sha256").update(text).digest("hex");
}

function sameHash(a: string, b: string): boolean {
  const x = Buffer.from(a, "hex");
  const y = Buffer.from(b, "hex");
  return x.length === y.length && timingSafeEqual(x, y);
}

/** The endpoint (see the file's header). */
export class AgentEndpoint {
  private readonly sessions = new Map<string, AgentSession>();
  private readonly leases = new Map<string, Lease>();
  /** Requests refused (429) and answered with another error, since start. */
  readonly counters = { requests: 0, refused: 0, errors: 0, unrecordedParseFailures: 0 };
  /** Where completions' time went (the endpoint's own overhead apart from waiting for and running batches). */
  readonly timings = new RequestTimings();

  private constructor(
    private readonly server: http.Server,
    private readonly ctx: CompletionContext,
    private readonly listen: EndpointListen,
    readonly baseURL: string,
  ) {}

  /** Starts listening; `ctx` is how completions are made. */
  static async start(ctx: CompletionContext, listen: EndpointListen): Promise<AgentEndpoint> {
    const server = http.createServer();
    server.headersTimeout = READ_TIMEOUT_MS;
    server.requestTimeout = READ_TIMEOUT_MS + ctx.requestTimeoutMs;
    server.keepAliveTimeout = 5_000;
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(listen.port ?? 0, listen.host ?? "127.0.0.1", () => resolve());
    });
    const a = server.address() as AddressInfo;
    const host = a.family === "IPv6" ? `[${a.address}]` : a.address;
    const ep = new AgentEndpoint(server, { ...ctx }, listen, `http://${host}:${a.port}/v1`);
    ep.ctx.onParseFailure = () => ep.counters.unrecordedParseFailures++;
    server.on("request", (req, res) => void ep.handle(req, res));
    return ep;
  }

  /** The served model's name. */
  get model(): string {
    return this.ctx.model;
  }

  /** Open sessions (not ended): a batch waits no longer once each of them has a request queued. */
  expected(): number {
    let n = 0;
    for (const s of this.sessions.values()) if (!s.ended) n++;
    return n;
  }

  /** Opens a lease of sessions, one per spec, ending by itself after `leaseMs`. */
  open(specs: readonly SessionSpec[], o: { leaseMs: number; onClose?: () => void }): { lease: string; sessions: OpenedSession[] } {
    const id = randomBytes(9).toString("base64url");
    const opened: OpenedSession[] = [];
    const sessions = specs.map((spec) => {
      const sid = randomBytes(9).toString("base64url").replace(/[-_]/g, "x");
      const secret = randomBytes(24).toString("base64url");
      const s = new AgentSession(sid, sha256(secret), spec, id);
      this.sessions.set(sid, s);
      opened.push({ id: sid, apiKey: `hs_${sid}_${secret}`, itemId: spec.itemId, item: spec.item, sample: spec.sample });
      return s;
    });
    const timer = setTimeout(() => this.close(id, undefined, `the lease ended after ${o.leaseMs} ms with the session still open`), o.leaseMs);
    timer.unref();
    this.leases.set(id, { id, sessions, deadline: Date.now() + o.leaseMs, timer, closed: false, onClose: o.onClose ?? (() => undefined) });
    return { lease: id, sessions: opened };
  }

  /** Ends one session (its agent finished, failed or ran out of time); later requests on it get 404. */
  finish(sessionId: string, end: SessionEnd): void {
    const s = this.sessions.get(sessionId);
    if (!s || s.ended) return;
    s.ended = end;
    if (s.engineRow) this.ctx.batcher.drop(s.engineRow.session);
    s.engineRow = undefined;
  }

  /**
   * Closes a lease: sessions not finished yet end with `ends`' entry, else
   * `why` as their error. Returns its sessions (their sequences, stats and
   * ends); a lease closed already returns undefined.
   */
  close(lease: string, ends?: ReadonlyMap<string, SessionEnd>, why = "the lease was closed before the session finished"): AgentSession[] | undefined {
    const l = this.leases.get(lease);
    if (!l || l.closed) return undefined;
    l.closed = true;
    clearTimeout(l.timer);
    this.leases.delete(lease);
    for (const s of l.sessions) {
      const end = ends?.get(s.id);
      if (end && !s.ended) this.finish(s.id, end);
      else this.finish(s.id, { error: why });
      this.sessions.delete(s.id);
    }
    l.onClose();
    return l.sessions;
  }

  /** Open leases (their ids). */
  openLeases(): string[] {
    return [...this.leases.keys()];
  }

  /** Stops listening and ends every lease. */
  async shutdown(): Promise<void> {
    for (const id of [...this.leases.keys()]) this.close(id, undefined, "the endpoint shut down");
    this.ctx.batcher.close();
    await this.ctx.templates.close();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const t0 = performance.now();
    let stream: SseReply | undefined;
    const abort = new AbortController();
    res.on("close", () => {
      if (!res.writableFinished) abort.abort();
    });
    try {
      this.counters.requests++;
      const url = new URL(req.url ?? "/", "http://x");
      const route = `${req.method} ${url.pathname.replace(/\/+$/, "")}`;
      const who = this.authorize(req);
      if (route === "GET /v1/models") return json(res, 200, { object: "list", data: [this.modelEntry()] });
      if (req.method === "GET" && url.pathname.startsWith("/v1/models/")) {
        const name = decodeURIComponent(url.pathname.slice("/v1/models/".length));
        if (name !== this.ctx.model) throw this.unknownModel(name);
        return json(res, 200, this.modelEntry());
      }
      if (route === "POST /v1/chat/completions") {
        const request = parseChatRequest(await readJson(req, this.listen.bodyLimitBytes ?? DEFAULT_BODY_LIMIT));
        if (request.model !== this.ctx.model) throw this.unknownModel(request.model);
        stream = request.stream ? this.streamFor(res, request.includeUsage, request.tools.length > 0 && request.toolChoice !== "none") : undefined;
        const done = who === "run" ? await completeUnrecorded(this.ctx, request, abort.signal, stream) : await completeInSession(this.ctx, request, who, abort.signal, stream);
        const { timing, ...body } = done;
        if (stream) stream.finish(body);
        else json(res, 200, body);
        this.timings.add(performance.now() - t0, timing);
        return;
      }
      if (route === "POST /hearth/v1/session/finish") {
        if (who === "run") throw new EndpointError(400, "finish needs the episode's session key, not the run's", { code: "session_key_required" });
        const body = await readJson(req, 64 * 1024);
        const end = sessionEnd(body);
        this.finish(who.id, end);
        return json(res, 200, { ok: true, session: who.id });
      }
      if (route === "GET /hearth/v1/session") {
        if (who === "run") throw new EndpointError(400, "this route needs a session key", { code: "session_key_required" });
        return json(res, 200, { id: who.id, item: who.spec.itemId, sample: who.spec.sample, sequences: who.allSequences().length, stats: { ...who.stats, parseFailures: who.stats.parseFailures.length } });
      }
      const known = ["/v1/models", "/v1/chat/completions", "/hearth/v1/session/finish", "/hearth/v1/session"].includes(url.pathname.replace(/\/+$/, ""));
      throw new EndpointError(known ? 405 : 404, known ? `${req.method} is not allowed on ${url.pathname}` : `unknown route ${req.method} ${url.pathname}: the endpoint serves GET /v1/models and POST /v1/chat/completions`, { code: known ? "method_not_allowed" : "unknown_url" });
    } catch (err) {
      const e = err instanceof EndpointError ? err : new EndpointError(500, `the endpoint failed: ${(err as Error)?.message ?? String(err)}`, { code: "internal_error", cause: err });
      if (e.status === 429) this.counters.refused++;
      else this.counters.errors++;
      if (stream?.fail(e) || res.headersSent || res.destroyed) return;
      const headers: Record<string, string> = e.retryAfter !== undefined ? { "retry-after": String(e.retryAfter) } : {};
      if (e.status === 401) headers["www-authenticate"] = "Bearer";
      json(res, e.status === 499 ? 400 : e.status, e.body(), headers);
    }
  }

  /** A streamed reply: content goes out as it is sampled, what a tool call may become is held back (sse.ts). */
  private streamFor(res: ServerResponse, includeUsage: boolean, tools: boolean): SseReply {
    const tok = this.ctx.tokenizer;
    const parser = tools ? this.ctx.parser : undefined;
    return new SseReply(res, { decode: (ids) => tok.decode(ids), eosIds: tok.eosIds, contentSoFar: (t) => (parser ? parser.contentSoFar(t) : t.length), includeUsage, model: this.ctx.model });
  }

  /** The run ("run") or the open session a request's key names; 401 / 404 otherwise. */
  private authorize(req: IncomingMessage): "run" | AgentSession {
    const h = req.headers.authorization ?? "";
    const m = /^Bearer\s+(\S+)$/i.exec(h);
    if (!m) throw new EndpointError(401, "no API key: send Authorization: Bearer KEY (the run's key, or an episode session's)", { code: "invalid_api_key" });
    const key = m[1]!;
    const sk = /^hs_([A-Za-z0-9]+)_([A-Za-z0-9_-]+)$/.exec(key);
    if (sk) {
      const s = this.sessions.get(sk[1]!);
      if (!s) throw new EndpointError(404, `no open session ${sk[1]}: it has ended (its lease closed) or never existed on this executor`, { code: "session_not_found" });
      if (!sameHash(sha256(sk[2]!), s.keyHash)) throw new EndpointError(401, `wrong key for session ${sk[1]}`, { code: "invalid_api_key" });
      if (s.ended) throw new EndpointError(404, `session ${s.id} has ended${s.ended.error ? ` (${s.ended.error})` : ""}`, { code: "session_ended" });
      return s;
    }
    if (!sameHash(sha256(key), this.listen.runKeyHash)) throw new EndpointError(401, "wrong API key: use the run's key (run.endpoint.apiKey) or an episode session's", { code: "invalid_api_key" });
    return "run";
  }

  private modelEntry(): Record<string, unknown> {
    return { id: this.ctx.model, object: "model", created: 0, owned_by: "hearth" };
  }

  private unknownModel(name: string): EndpointError {
    return new EndpointError(404, `the model '${name}' does not exist here: this endpoint serves '${this.ctx.model}'`, { param: "model", code: "model_not_found" });
  }
}

/** The last completions' times: total, waiting for a batch, the batch, and the rest (the endpoint's own overhead: reading, rendering, tokenising, parsing, answering). */
export class RequestTimings {
  private readonly rows: Array<{ total: number; queued: number; engine: number }> = [];
  constructor(private readonly keep = 20_000) {}

  add(total: number, t: CompletionTiming | undefined): void {
    if (this.rows.length >= this.keep) this.rows.shift();
    this.rows.push({ total, queued: t?.queuedMs ?? 0, engine: t?.engineMs ?? 0 });
  }

  /** Percentiles (ms) of each part over the recorded completions, and how many; `clear` starts afresh. */
  summary(clear = false): { n: number; overhead: { p50: number; p99: number }; queued: { p50: number; p99: number }; engine: { p50: number; p99: number }; total: { p50: number; p99: number } } {
    const pick = (f: (r: { total: number; queued: number; engine: number }) => number): { p50: number; p99: number } => {
      const xs = this.rows.map(f).sort((a, b) => a - b);
      const at = (q: number): number => (xs.length === 0 ? NaN : xs[Math.min(xs.length - 1, Math.floor(q * xs.length))]!);
      return { p50: at(0.5), p99: at(0.99) };
    };
    const out = { n: this.rows.length, overhead: pick((r) => r.total - r.queued - r.engine), queued: pick((r) => r.queued), engine: pick((r) => r.engine), total: pick((r) => r.total) };
    if (clear) this.rows.length = 0;
    return out;
  }
}

/** `{ answer?, reward? }` of a finish request. */
function sessionEnd(body: unknown): SessionEnd {
  const b = (body ?? {}) as Record<string, unknown>;
  if (typeof b !== "object" || Array.isArray(b)) throw new EndpointError(400, "body: expected { answer?, reward? }", { param: "body" });
  if (b.answer !== undefined && typeof b.answer !== "string") throw new EndpointError(400, "answer: expected a string", { param: "answer" });
  if (b.reward !== undefined && (typeof b.reward !== "number" || !Number.isFinite(b.reward))) throw new EndpointError(400, "reward: expected a finite number", { param: "reward" });
  return { ...(b.answer !== undefined ? { answer: b.answer as string } : {}), ...(b.reward !== undefined ? { reward: b.reward as number } : {}) };
}

function json(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(text), ...headers });
  res.end(text);
}

/** Reads and parses a JSON body of at most `limit` bytes (413 past it, 400 when not JSON). */
async function readJson(req: IncomingMessage, limit: number): Promise<unknown> {
  const declared = Number(req.headers["content-length"] ?? NaN);
  if (declared > limit) throw new EndpointError(413, `the request body is ${declared} bytes; the limit is ${limit}`, { code: "body_too_large" });
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > limit) throw new EndpointError(413, `the request body is over the limit of ${limit} bytes`, { code: "body_too_large" });
    chunks.push(c as Buffer);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString("utf8"));
  } catch (err) {
    throw new EndpointError(400, `the body is not JSON: ${(err as Error).message}`, { param: "body", code: "invalid_json" });
  }
}
