import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Kafka, logLevel, type KafkaConfig } from 'kafkajs';
import { startLocalKafka, type LocalKafka } from '../scripts/localKafka.js';
import { createRelay } from '../src/relay/relay.js';
import { enqueue } from '../src/enqueue.js';
import { ConfigError } from '../src/shared/errors.js';
import { errorLabel } from '../src/metrics/errorLabel.js';
import { readSetting, type Setting } from '../src/shared/settings.js';
import {
  KAFKA_SECURITY_SETTINGS,
  describeKafkaSecurity,
  kafkaSecurityConfig,
  type KafkaSecurityOptions,
} from '../src/shared/kafkaSecurity.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic } from './helpers/kafka.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';

const USER = 'relay-user';
const PASSWORD = 'relay-pass-8c1f';

let broker: LocalKafka;
let db: TestSchema;
const secrets = mkdtempSync(join(tmpdir(), 'scram-'));
before(async () => {
  broker = await startLocalKafka({ scram: { username: USER, password: PASSWORD } });
  db = await createTestSchema('scram');
});
after(async () => {
  await db?.drop();
  await broker?.destroy();
  rmSync(secrets, { recursive: true, force: true });
});

/** The security options as `outbox-relay run` reads them: flags, environment, files. */
function fromEnvironment(env: NodeJS.ProcessEnv, flags: Record<string, string> = {}): KafkaSecurityOptions {
  const out: Record<string, unknown> = {};
  for (const s of KAFKA_SECURITY_SETTINGS as readonly Setting<unknown>[]) out[s.option] = readSetting(s, s.flag ? flags[s.flag] : undefined, env);
  return out as KafkaSecurityOptions;
}

/** A client of the SCRAM listener; `patient` keeps kafkajs' default retries (a fresh
 *  broker's group coordinator can take a while), otherwise failures surface fast. */
function client(security: Pick<KafkaConfig, 'ssl' | 'sasl'>, patient = false): Kafka {
  return new Kafka({
    clientId: uniqueName('scram'),
    brokers: [broker.saslBrokers as string],
    logLevel: logLevel.NOTHING,
    connectionTimeout: 3_000,
    ...(patient ? {} : { retry: { retries: 1, initialRetryTime: 100, maxRetryTime: 500 } }),
    ...security,
  });
}

async function enqueueRows(topic: string, count: number): Promise<void> {
  const c = await db.pool.connect();
  try {
    await enqueue(c, Array.from({ length: count }, (_, i) => ({ topic, key: `k${i % 5}`, payload: { i } })), { schema: db.schema });
  } finally {
    c.release();
  }
}

async function unsent(topic: string): Promise<number> {
  const { rows } = await db.pool.query<{ n: number }>(`SELECT count(*)::int AS n FROM "${db.schema}".outbox WHERE topic = $1 AND sent_at IS NULL`, [topic]);
  return rows[0]?.n ?? -1;
}

async function readAll(kafka: Kafka, topic: string, count: number): Promise<string[]> {
  const consumer = kafka.consumer({ groupId: uniqueName('reader'), maxWaitTimeInMs: 100 });
  const ids: string[] = [];
  await consumer.connect();
  try {
    await consumer.subscribe({ topic, fromBeginning: true });
    await consumer.run({ eachMessage: async ({ message }) => void ids.push(String(message.headers?.['message-id'])) });
    await waitFor(`${count} messages on ${topic}`, () => new Set(ids).size >= count);
  } finally {
    await consumer.disconnect();
  }
  return [...new Set(ids)];
}

for (const mechanism of ['scram-sha-256', 'scram-sha-512'] as const) {
  test(`integration: the relay publishes through a listener that requires ${mechanism.toUpperCase()}, credentials from the environment and a file`, async () => {
    const passwordFile = join(secrets, `${mechanism}.txt`);
    writeFileSync(passwordFile, `${PASSWORD}\n`, { mode: 0o600 });
    const options = fromEnvironment({ KAFKA_SASL_MECHANISM: mechanism, KAFKA_SASL_USERNAME: USER, KAFKA_SASL_PASSWORD_FILE: passwordFile });
    assert.equal(options.kafkaSaslPassword, PASSWORD, 'read from the file, trailing newline dropped');
    assert.ok(!JSON.stringify(describeKafkaSecurity(options)).includes(PASSWORD), 'the loggable description has no password');
    const security = kafkaSecurityConfig(options);
    assert.deepEqual(security.sasl, { mechanism, username: USER, password: PASSWORD });

    const topic = await createTopic(2, [broker.brokers]);
    await enqueueRows(topic, 25);
    // The security options too: the platformatic adapter builds its own client from them.
    const relay = createRelay({ ...options, producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: [broker.saslBrokers as string], schema: db.schema, kafka: client(security), horizonMaxWaitMs: 1_000 });
    const errors: string[] = [];
    relay.on('batchError', (e) => errors.push(`${errorLabel(e.error)}: ${e.error.message}`));
    await relay.start();
    try {
      await waitFor('25 rows sent', async () => (await unsent(topic)) === 0 || (errors.length > 0 && { errors }));
    } finally {
      await relay.stop();
    }
    assert.deepEqual(errors, []);
    assert.equal(await unsent(topic), 0);
    const { rows } = await db.pool.query<{ message_id: string }>(`SELECT message_id FROM "${db.schema}".outbox WHERE topic = $1`, [topic]);
    const read = await readAll(client(security, true), topic, 25);
    assert.deepEqual(read.sort(), rows.map((r) => r.message_id).sort(), 'read back over SCRAM: every row, once each');
  });
}

test('integration: a wrong SCRAM password fails authentication; the rows stay unsent', async () => {
  const topic = await createTopic(1, [broker.brokers]);
  await enqueueRows(topic, 5);
  const wrongOptions = fromEnvironment({ KAFKA_SASL_MECHANISM: 'scram-sha-512', KAFKA_SASL_USERNAME: USER, KAFKA_SASL_PASSWORD: 'not-the-password' });
  const wrong = kafkaSecurityConfig(wrongOptions);
  const admin = client(wrong).admin();
  await assert.rejects(admin.connect(), (e: Error) => e.name === 'KafkaJSSASLAuthenticationError');
  await admin.disconnect().catch(() => undefined);

  // No credentials at all on the SASL listener fails too.
  const anonymous = client({}).admin();
  await assert.rejects(
    (async () => {
      await anonymous.connect();
      await anonymous.listTopics();
    })(),
  );
  await anonymous.disconnect().catch(() => undefined);

  const relay = createRelay({ ...wrongOptions, producer: TEST_PRODUCER, databaseUrl: db.databaseUrl, kafkaBrokers: [broker.saslBrokers as string], schema: db.schema, kafka: client(wrong), retryMaxDelayMs: 100, horizonMaxWaitMs: 1_000 });
  const failed = new Promise<string>((resolve) => relay.once('batchError', (e) => resolve(errorLabel(e.error))));
  await relay.start();
  try {
    assert.equal(await failed, 'kafka_sasl_authentication_error');
    assert.equal(await unsent(topic), 5);
  } finally {
    await relay.abort();
  }
});

test('kafka security settings: the password never from a flag; incomplete combinations name the setting', () => {
  const password = KAFKA_SECURITY_SETTINGS.find((s) => s.env === 'KAFKA_SASL_PASSWORD');
  assert.equal(password?.flag, undefined, 'no --kafka-sasl-password flag');
  assert.equal(password?.secret, true);
  assert.deepEqual(kafkaSecurityConfig(fromEnvironment({})), {}, 'nothing set: plaintext, no SASL');
  assert.deepEqual(kafkaSecurityConfig(fromEnvironment({ KAFKA_SSL: 'true' })), { ssl: true });
  const flags = fromEnvironment({ KAFKA_SASL_PASSWORD: 'p' }, { '--kafka-ssl': 'yes', '--kafka-sasl-mechanism': 'PLAIN', '--kafka-sasl-username': 'u' });
  assert.deepEqual(kafkaSecurityConfig(flags), { ssl: true, sasl: { mechanism: 'plain', username: 'u', password: 'p' } });
  const ca = join(secrets, 'ca.pem');
  writeFileSync(ca, '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
  assert.deepEqual(kafkaSecurityConfig({ kafkaSslCaFile: ca }).ssl, { ca: ['-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n'] });
  const bad = (options: KafkaSecurityOptions, setting: string): void =>
    assert.throws(() => kafkaSecurityConfig(options), (e: unknown) => e instanceof ConfigError && e.setting === setting && !e.message.includes('s3cret'));
  bad({ kafkaSaslMechanism: 'scram-sha-256', kafkaSaslPassword: 's3cret' }, 'kafkaSaslUsername');
  bad({ kafkaSaslMechanism: 'scram-sha-256', kafkaSaslUsername: 'u' }, 'kafkaSaslPassword');
  // The setting named is the one the user set, with what is missing in the message.
  bad({ kafkaSaslPassword: 's3cret' }, 'kafkaSaslPassword');
  bad({ kafkaSslCertFile: ca }, 'kafkaSslKeyFile');
  bad({ kafkaSslCaFile: join(secrets, 'missing.pem') }, 'kafkaSslCaFile');
  assert.throws(() => fromEnvironment({ KAFKA_SASL_MECHANISM: 'gssapi' }), (e: unknown) => e instanceof ConfigError && e.setting === 'KAFKA_SASL_MECHANISM');
  assert.throws(() => fromEnvironment({ KAFKA_SASL_PASSWORD_FILE: join(secrets, 'missing') }), (e: unknown) => e instanceof ConfigError && e.setting === 'KAFKA_SASL_PASSWORD_FILE');
});
