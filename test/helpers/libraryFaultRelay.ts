// A relay process for test/libraryGuard.integration.test.ts: a real relay on the real
// broker and Postgres, with one fault injected into a client library by patching the
// library in this process. The injected call never settles, and the library's own code
// throws from a callback (setImmediate), as @platformatic/kafka 1.35's connection pool did
// after a broker bounce: an uncaughtException whose top stack frame is the library's.
// The admin fault is that bug's trigger: the admin's cached broker list is emptied, which
// made 1.35's ConnectionPool throw a TypeError by itself; the helper says how the call is
// answered now.
//
// Environment: LIBFAULT (send | commit | admin | metadata | pg), LIBFAULT_AT (the eligible call to
// break, default 2), DATABASE_URL, OUTBOX_SCHEMA, KAFKA_BROKERS, OUTBOX_DELIVERY,
// OUTBOX_PRODUCER, OUTBOX_TRANSACTIONAL_ID_PREFIX. Prints `{"libfault":...}` lines.
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import type { Kafka, Producer, Transaction } from 'kafkajs';
import { createRelay } from '../../src/relay/relay.js';
import { createKafka } from '../../src/shared/kafka.js';
import { createLogger } from '../../src/shared/logger.js';
import { instrumentRelay } from '../../src/metrics/relayMetrics.js';
import { libraryCallsInFlight, type ClientLibrary } from '../../src/shared/libraryGuard.js';
import { PLATFORMATIC_PACKAGE } from '../../src/relay/platformaticPackage.js';
import { metricValue } from './metrics.js';

const fault = process.env.LIBFAULT as 'send' | 'commit' | 'admin' | 'metadata' | 'pg';
const at = Number(process.env.LIBFAULT_AT ?? '2');
const delivery = process.env.OUTBOX_DELIVERY === 'exactly-once' ? 'exactly-once' : 'at-least-once';
const producer = (process.env.OUTBOX_PRODUCER ?? 'kafkajs') as 'kafkajs' | 'platformatic';
const brokers = process.env.KAFKA_BROKERS!.split(',');
const require = createRequire(import.meta.url);
const plt = require(PLATFORMATIC_PACKAGE) as typeof import('@platformatic/kafka');
const pltDist = dirname(require.resolve(PLATFORMATIC_PACKAGE));

const say = (line: Record<string, unknown>): void => void process.stdout.write(`${JSON.stringify({ libfault: true, ...line })}\n`);

/** Library code that throws: each a real function of the library, handed a value it does not expect. */
const libraryThrows: Record<ClientLibrary, () => Promise<() => void>> = {
  kafkajs: async () => {
    const Decoder = require('kafkajs/src/protocol/decoder') as new (buffer: unknown) => { readInt32(): number };
    return () => void new Decoder(undefined).readInt32();
  },
  pg: async () => {
    const { serialize } = require('pg-protocol') as { serialize: { parse(query: unknown): unknown } };
    return () => void serialize.parse(undefined);
  },
  // Not ConnectionPool.get(undefined), which threw in 1.x: 2.x answers it with an error
  // through its callback (the broker-bounce fix), so it no longer throws from anywhere.
  '@platformatic/kafka': async () => {
    const { Reader } = (await import(pathToFileURL(join(pltDist, 'protocol', 'reader.js')).href)) as {
      Reader: new (buffer: unknown) => unknown;
    };
    return () => void new Reader(undefined);
  },
};

let eligible = 0;
let started = false;
/** Whether this eligible call is the one to break (once). */
const due = (): boolean => ++eligible === at;

/** The call in flight hangs; the library throws from a callback right after. */
async function breakCall<T>(library: ClientLibrary, call: string): Promise<T> {
  const thrower = await libraryThrows[library]();
  setImmediate(() => {
    say({ injected: call, library, inFlight: libraryCallsInFlight(library) });
    thrower();
  });
  return new Promise<T>(() => undefined);
}

function patchKafkajs(kafka: Kafka): Kafka {
  if (fault === 'metadata') {
    const makeAdmin = kafka.admin.bind(kafka);
    kafka.admin = (config) => {
      const admin = makeAdmin(config);
      const fetch = admin.fetchTopicMetadata.bind(admin);
      admin.fetchTopicMetadata = (options) => (due() ? breakCall('kafkajs', 'admin.fetchTopicMetadata') : fetch(options));
      return admin;
    };
  }
  const makeProducer = kafka.producer.bind(kafka);
  kafka.producer = (config) => {
    const p: Producer = makeProducer(config);
    if (config?.transactionalId) {
      const transaction = p.transaction.bind(p);
      p.transaction = async () => {
        const t: Transaction = await transaction();
        if (fault === 'send') {
          const sendBatch = t.sendBatch.bind(t);
          t.sendBatch = (batch) => (due() ? breakCall('kafkajs', 'transaction.sendBatch') : sendBatch(batch));
        } else if (fault === 'commit') {
          const commit = t.commit.bind(t);
          t.commit = () => (due() ? breakCall('kafkajs', 'transaction.commit') : commit());
        }
        return t;
      };
    } else if (fault === 'send') {
      const sendBatch = p.sendBatch.bind(p);
      // Not the topic creator's empty sends (src/relay/producer.ts).
      p.sendBatch = (batch) => (batch.topicMessages?.some((t) => t.messages.length > 0) && due() ? breakCall('kafkajs', 'producer.sendBatch') : sendBatch(batch));
    }
    return p;
  };
  return kafka;
}

if (fault === 'send' && producer === 'platformatic') {
  const send = plt.Producer.prototype.send;
  plt.Producer.prototype.send = function (this: unknown, ...args: unknown[]) {
    return due() ? breakCall('@platformatic/kafka', 'producer.send') : (send as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof send;
}
if (fault === 'commit' && producer === 'platformatic') {
  // Exactly-once on @platformatic/kafka: a unit's transaction commit (src/relay/platformaticUnit.ts).
  // The package does not export its Transaction class: each begun transaction's commit is wrapped.
  const begin = plt.Producer.prototype.beginTransaction;
  plt.Producer.prototype.beginTransaction = async function (this: unknown, ...args: unknown[]) {
    const transaction = (await (begin as (...a: unknown[]) => Promise<{ commit(): Promise<void> }>).apply(this, args)) as { commit(): Promise<void> };
    const commit = transaction.commit.bind(transaction);
    transaction.commit = () => (due() ? breakCall('@platformatic/kafka', 'transaction.commit') : commit());
    return transaction;
  } as typeof begin;
}
if (fault === 'metadata' && producer === 'platformatic') {
  const metadata = plt.Producer.prototype.metadata;
  plt.Producer.prototype.metadata = function (this: unknown, ...args: unknown[]) {
    return due() ? breakCall('@platformatic/kafka', 'producer.metadata') : (metadata as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof metadata;
}
if (fault === 'admin') {
  const list = plt.Admin.prototype.listConsumerGroupOffsets;
  plt.Admin.prototype.listConsumerGroupOffsets = function (this: InstanceType<typeof plt.Admin>, ...args: unknown[]) {
    const call = (): unknown => (list as (...a: unknown[]) => unknown).apply(this, args);
    if (!due()) return call();
    // The bug as it happened: the admin's cached metadata lacks the group coordinator.
    // With no topics asked, metadata() answers from the cache, whose broker map it shares.
    return this.metadata({ topics: [] }).then((metadata) => {
      say({ injected: 'admin.listConsumerGroupOffsets', library: '@platformatic/kafka', cachedBrokers: metadata.brokers.size });
      metadata.brokers.clear();
      // How the library answers the call: 1.x threw from its connection pool instead.
      return (call() as Promise<unknown>).then(
        (value) => (say({ answered: 'resolved' }), value),
        (error: unknown) => {
          say({ answered: 'rejected', error: error instanceof Error ? `${error.constructor.name}: ${error.message}` : String(error) });
          throw error;
        },
      );
    });
  } as typeof list;
}
if (fault === 'pg') {
  const query = pg.Client.prototype.query;
  pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
    const text = typeof args[0] === 'string' ? args[0] : (args[0] as { text?: string } | undefined)?.text;
    // Promise-form calls only (pg-pool calls with a callback inside pool.query), not the horizon connection's setup.
    // After the start: a start that fails is the caller's to retry (relay.start() rejects), not the loops'.
    const eligibleCall = started && typeof args[args.length - 1] !== 'function' && !/plan_cache_mode/.test(text ?? '');
    return eligibleCall && due() ? breakCall('pg', 'client.query') : (query as (...a: unknown[]) => unknown).apply(this, args);
  } as typeof query;
}

const logger = createLogger('info');
const kafka = patchKafkajs(createKafka({ brokers, clientId: 'libfault', logger }));
const relay = createRelay({
  databaseUrl: process.env.DATABASE_URL!,
  schema: process.env.OUTBOX_SCHEMA!,
  kafkaBrokers: brokers,
  kafka,
  producer,
  delivery,
  ...(delivery === 'exactly-once' ? { transactionalIdPrefix: process.env.OUTBOX_TRANSACTIONAL_ID_PREFIX! } : {}),
  batchSize: 50,
  logger,
});
const metrics = instrumentRelay(relay, { processMetrics: false });
relay.on('libraryError', (e) => {
  void metricValue(metrics.registry, 'outbox_relay_library_errors_total', { library: e.library }).then((value) => say({ counted: value, library: e.library }));
});
process.on('SIGTERM', () => {
  void relay.stop().then(async () => {
    await metrics.close();
    process.exit(0);
  });
});
await relay.start();
started = true;
say({ started: true, fault, delivery, producer });
