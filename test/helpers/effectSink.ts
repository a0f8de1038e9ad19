/**
 * A downstream service for the effect guard's tests: a node http server on 127.0.0.1 that
 * honours the `Idempotency-Key` header as payment and messaging APIs do. The first request
 * with a key applies the effect; a later one with the same key gets the same answer and
 * applies nothing. It records every request (key, body, sender, time), how many requests
 * of one key were in flight at once, and which effects it applied.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import { listenOnLoopback } from './loopback.js';

export interface SinkRequest {
  key: string;
  body: unknown;
  pid: string | undefined;
  /** Date.now() when the request arrived. */
  at: number;
}

export interface EffectSink {
  url: string;
  /** Every request, in arrival order. */
  requests: SinkRequest[];
  /** Requests per Idempotency-Key. */
  requestsPerKey(): Map<string, number>;
  /** The effects applied, each once, by key. */
  applied: Map<string, SinkRequest>;
  /** The most requests of one key in flight at once, by key. */
  mostInFlight: Map<string, number>;
  close(): Promise<void>;
}

function readBody(req: IncomingMessage): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (text += chunk));
    req.on('end', () => resolve(text));
    req.on('error', reject);
  });
}

/** Starts the sink; each request is answered after `delayMs` (a downstream call takes time). */
export async function startEffectSink(delayMs = 20): Promise<EffectSink> {
  const requests: SinkRequest[] = [];
  const applied = new Map<string, SinkRequest>();
  const inFlight = new Map<string, number>();
  const mostInFlight = new Map<string, number>();
  const server: Server = createServer((req, res) => {
    const at = Date.now();
    const key = req.headers['idempotency-key'];
    if (typeof key !== 'string' || key === '') {
      res.writeHead(400).end('Idempotency-Key required');
      return;
    }
    const now = (inFlight.get(key) ?? 0) + 1;
    inFlight.set(key, now);
    mostInFlight.set(key, Math.max(mostInFlight.get(key) ?? 0, now));
    // 'close' comes once the answer is sent, or when the sender's socket dies (a SIGKILLed client).
    res.on('close', () => inFlight.set(key, (inFlight.get(key) ?? 1) - 1));
    void readBody(req).then((text) => {
      const request: SinkRequest = { key, body: JSON.parse(text) as unknown, pid: req.headers['x-pid'] as string | undefined, at };
      requests.push(request);
      if (!applied.has(key)) applied.set(key, request);
      setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ id: key })), delayMs);
    });
  });
  server.keepAliveTimeout = 1_000;
  const port = await listenOnLoopback(server);
  return {
    url: `http://127.0.0.1:${port}/notifications`,
    requests,
    requestsPerKey: () => {
      const counts = new Map<string, number>();
      for (const r of requests) counts.set(r.key, (counts.get(r.key) ?? 0) + 1);
      return counts;
    },
    applied,
    mostInFlight,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
