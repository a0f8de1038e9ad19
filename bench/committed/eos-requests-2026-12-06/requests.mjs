// Preloaded into a bench relay process (NODE_OPTIONS="--import <this file>", with
// OUTBOX_REQUESTS_DIR set): every Kafka request @platformatic/kafka sends, timed from the
// moment it goes on the wire to its answer, through the client's own tracing channel
// (plt:kafka:connections:api). Written as one JSON line per request to
// <OUTBOX_REQUESTS_DIR>/requests-<pid>.jsonl when the process exits. No code of the relay
// is changed: the same file times the shipped tree and any other.
import { tracingChannel } from 'node:diagnostics_channel';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';

const dir = process.env.OUTBOX_REQUESTS_DIR;
if (dir) {
  const started = new WeakMap();
  const lines = [];
  const t0 = performance.timeOrigin;
  tracingChannel('plt:kafka:connections:api').subscribe({
    start(d) {
      started.set(d, performance.now());
    },
    asyncStart(d) {
      const at = started.get(d);
      if (at === undefined) return;
      const error = d.error ? String(d.error.apiCode ?? d.error.code ?? d.error.message).slice(0, 60) : undefined;
      const errors = d.error?.errors ? d.error.errors.map((e) => e.apiId ?? e.code ?? e.message).slice(0, 3) : undefined;
      lines.push(JSON.stringify({ api: d.apiKey, v: d.apiVersion, at: Math.round(t0 + at), ms: +(performance.now() - at).toFixed(2), ...(error && { error }), ...(errors && { errors }) }));
    },
    end() {},
    asyncEnd() {},
    error() {},
  });
  process.on('exit', () => writeFileSync(join(dir, `requests-${process.pid}.jsonl`), lines.join('\n') + '\n'));
}
