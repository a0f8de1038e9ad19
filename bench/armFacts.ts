/**
 * What an arm of the bench actually ran, as the running relay or consumer reports it (the
 * `outbox-relay:relay-started` and `outbox-relay:consumer-started` diagnostics channels,
 * src/shared/diagnostics.ts), not what the bench asked for: the Kafka client and its
 * version, the delivery mode, Node's version and our commit. Rows carry these facts into
 * the committed summary, and a row whose label names another client or mode than the one
 * that ran fails the run (the figures of 2026-12-03 06:46 labelled "producer platformatic"
 * ran kafkajs, which nothing caught).
 */
import diagnosticsChannel from 'node:diagnostics_channel';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The Kafka clients an arm can run on, by the name the relay's `producer` option gives them. */
export type Client = 'kafkajs' | 'platformatic';

const PACKAGES: Record<Client, string> = { kafkajs: 'kafkajs', platformatic: '@platformatic/kafka' };

export interface ArmFacts {
  /** A relay, our consumer, a client used directly (the ceilings, the raw consumer), or Kafka's own Java client as a reference (bench/kafkaReference.ts). */
  role: 'relay' | 'consumer' | 'raw' | 'reference';
  /** Our clients, or `kafka-clients`: Kafka's own Java client (the reference). */
  client: Client | 'kafka-clients';
  /** The version of the client's package as loaded. */
  clientVersion: string;
  /** Relays: `at-least-once` or `exactly-once`, as the relay announced it. */
  delivery?: string;
  /** Exactly-once relays: their units of shards, as the relay announced them. */
  units?: number;
  node: string;
  /** Our commit (`<hash>` or `<hash>+dirty`), or null outside a git checkout. */
  commit: string | null;
}

/** The client's package.json version, found from `from` upwards as Node resolves packages. */
export function clientVersion(client: Client, from: string): string {
  for (let dir = from; ; dir = dirname(dir)) {
    const file = join(dir, 'node_modules', PACKAGES[client], 'package.json');
    if (existsSync(file)) return String((JSON.parse(readFileSync(file, 'utf8')) as { version?: unknown }).version);
    if (dirname(dir) === dir) throw new Error(`bench: ${PACKAGES[client]} not found from ${from}`);
  }
}

/** The commit checked out at `dir`, `+dirty` when the tree differs from it (bench/committed/ aside). */
export function commitAt(dir: string): string | null {
  try {
    const hash = execFileSync('git', ['rev-parse', '--short=12', 'HEAD'], { cwd: dir, encoding: 'utf8' }).trim();
    const changed = execFileSync('git', ['status', '--porcelain'], { cwd: dir, encoding: 'utf8' })
      .split('\n')
      .filter((l) => l.trim() !== '' && !l.slice(3).startsWith('bench/committed/'));
    return changed.length > 0 ? `${hash}+dirty` : hash;
  } catch {
    return null;
  }
}

/** A client's name as the relay reports its adapter (`producer`), checked. */
export function asClient(name: string): Client {
  if (name !== 'kafkajs' && name !== 'platformatic') throw new Error(`bench: unknown Kafka client "${name}"`);
  return name;
}

/**
 * Calls `seen` with what each relay started in this process announces, until the
 * returned function is called.
 */
export function onRelayStarted(seen: (m: { producer: string; delivery: string; schema: string; units?: number }) => void): () => void {
  const listener = (m: unknown): void => seen(m as { producer: string; delivery: string; schema: string; units?: number });
  diagnosticsChannel.subscribe('outbox-relay:relay-started', listener);
  return () => void diagnosticsChannel.unsubscribe('outbox-relay:relay-started', listener);
}

/** As onRelayStarted, for consumers. */
export function onConsumerStarted(seen: (m: { client: string; groupId: string; handler: string }) => void): () => void {
  const listener = (m: unknown): void => seen(m as { client: string; groupId: string; handler: string });
  diagnosticsChannel.subscribe('outbox-relay:consumer-started', listener);
  return () => void diagnosticsChannel.unsubscribe('outbox-relay:consumer-started', listener);
}

/** The clients a row's label names. */
function clientsNamed(label: string): Set<ArmFacts['client']> {
  const named = new Set<ArmFacts['client']>();
  if (/kafka-clients/i.test(label)) named.add('kafka-clients');
  if (/\bkafkajs\b/i.test(label)) named.add('kafkajs');
  if (/platformatic/i.test(label)) named.add('platformatic');
  return named;
}

/**
 * Why a row's label disagrees with the arms that ran for it, or undefined when it does
 * not: every client the label names must have run, and when the label names any client,
 * every client that ran must be named (a "defaults (producer platformatic)" row whose relay
 * ran kafkajs fails); a label saying exactly-once needs an arm that ran it, and an arm that
 * ran it needs a label that says so.
 */
export function labelProblem(label: string, ran: readonly ArmFacts[]): string | undefined {
  if (ran.length === 0) return undefined;
  const named = clientsNamed(label);
  const clients = new Set(ran.map((a) => a.client));
  const what = `"${label}" ran ${describeRan(ran)}`;
  for (const c of named) if (!clients.has(c)) return `${what}: it names ${c}, which no arm of it ran`;
  if (named.size > 0) for (const c of clients) if (!named.has(c)) return `${what}: ${c} ran but the label names only ${[...named].join(' and ')}`;
  const exactlyOnce = ran.some((a) => a.delivery === 'exactly-once');
  if (/exactly-once/i.test(label) && !exactlyOnce) return `${what}: it says exactly-once, which no arm of it ran`;
  if (exactlyOnce && !/exactly-once/i.test(label)) return `${what}: an arm ran exactly-once, which the label does not say`;
  // A label naming the units (exactly-once): every exactly-once arm ran that many.
  const units = /\b(\d+) units?\b/.exec(label);
  if (units) for (const a of ran) if (a.delivery === 'exactly-once' && a.units !== Number(units[1])) return `${what}: it names ${units[1]} units, an arm ran ${a.units ?? 'an unknown number of'}`;
  return undefined;
}

/** The arms in a few words, each distinct one once: `relay platformatic 1.35.0 at-least-once; raw kafkajs 2.2.4`. */
export function describeRan(ran: readonly ArmFacts[]): string {
  const parts = ran.map((a) => [a.role, a.client, a.clientVersion, a.delivery, a.units !== undefined && `${a.units} units`].filter(Boolean).join(' '));
  return [...new Set(parts)].join('; ');
}

/** The arms' facts once each (the same relay settings run in several rounds). */
export function distinctArms(ran: readonly ArmFacts[]): ArmFacts[] {
  const byKey = new Map<string, ArmFacts>();
  for (const a of ran) byKey.set(JSON.stringify([a.role, a.client, a.clientVersion, a.delivery, a.units, a.node, a.commit]), a);
  return [...byKey.values()];
}

const benchDir = dirname(fileURLToPath(import.meta.url));

/** The reference arm: Kafka's own Java client at `version`, run by this bench's process. */
export function referenceArm(version: string): ArmFacts {
  return { role: 'reference', client: 'kafka-clients', clientVersion: version, node: process.version, commit: commitAt(benchDir) };
}

/** An arm in the bench's own process: a client it uses directly (ceilings, the raw consumer), or a relay or consumer that announced itself. */
export function armHere(role: ArmFacts['role'], client: string, delivery?: string, units?: number): ArmFacts {
  const c = asClient(client);
  return { role, client: c, clientVersion: clientVersion(c, benchDir), ...(delivery !== undefined && { delivery }), ...(units !== undefined && { units }), node: process.version, commit: commitAt(benchDir) };
}
