import { test } from 'node:test';
import assert from 'node:assert/strict';
import { ConfigError } from '../../src/shared/errors.js';
import { quoteIdentifier } from '../../src/shared/identifiers.js';
import { readSetting } from '../../src/shared/settings.js';
import { kafkaBrokers, databaseUrl, schema } from '../../src/shared/commonSettings.js';
import { batchSize } from '../../src/relay/options.js';
import { resolveRelayOptions } from '../../src/relay/options.js';
import { backoffDelayMs } from '../../src/shared/backoff.js';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execFileSync } from 'node:child_process';
import { generateKeyPairSync } from 'node:crypto';

test('a flag wins over the environment, which wins over the default', () => {
  assert.equal(readSetting(batchSize, '7', { OUTBOX_BATCH_SIZE: '9' }), 7);
  assert.equal(readSetting(batchSize, undefined, { OUTBOX_BATCH_SIZE: '9' }), 9);
  assert.equal(readSetting(batchSize, undefined, {}), 500);
});

test('a bad value names where it came from and what is accepted', () => {
  assert.throws(() => readSetting(batchSize, '0', {}), (e: ConfigError) => e.setting === '--batch-size' && /from 1 to 10000/.test(e.message) && !e.retriable);
  assert.throws(() => readSetting(batchSize, undefined, { OUTBOX_BATCH_SIZE: '1.5' }), /OUTBOX_BATCH_SIZE: "1.5" is not a whole number/);
  assert.throws(() => readSetting(kafkaBrokers, 'a:1,,b', {}), /"b" is not host:port/);
  assert.deepEqual(readSetting(kafkaBrokers, ' a:1 , [::1]:9092 ', {}), ['a:1', '[::1]:9092']);
});

test('secrets come from the environment or a *_FILE, never a flag, and are never echoed', () => {
  const dir = mkdtempSync(join(tmpdir(), 'outbox-'));
  const file = join(dir, 'url');
  writeFileSync(file, 'postgres://relay:pw@db:5432/app\n');
  assert.equal(databaseUrl.flag, undefined);
  assert.equal(readSetting(databaseUrl, undefined, { DATABASE_URL_FILE: file }), 'postgres://relay:pw@db:5432/app');
  assert.throws(
    () => readSetting(databaseUrl, undefined, { DATABASE_URL: 'mysql://u:topsecret@h/db' }),
    (e: Error) => /scheme "mysql:"/.test(e.message) && !e.message.includes('topsecret'),
  );
  assert.throws(() => readSetting(databaseUrl, undefined, { DATABASE_URL_FILE: join(dir, 'missing') }), /DATABASE_URL_FILE: cannot read/);
});

test('identifiers are validated before they are quoted', () => {
  assert.equal(quoteIdentifier('app_events'), '"app_events"');
  for (const bad of ['x"; drop table y; --', '', '1abc', 'a-b', 'a'.repeat(64), 'Ünïcode']) {
    assert.throws(() => quoteIdentifier(bad, 'schema'), ConfigError, bad);
  }
  assert.equal(schema.check('x"; drop table y; --')?.includes('not a valid name'), true);
});

test('library options are validated up front with the option name', () => {
  const base = { databaseUrl: 'postgres://h/db', kafkaBrokers: ['h:9092'] };
  assert.equal(resolveRelayOptions(base).batchSize, 500);
  assert.throws(() => resolveRelayOptions({ ...base, batchSize: -1 }), /^ConfigError: batchSize: -1 is not a whole number/);
  assert.throws(() => resolveRelayOptions({ ...base, pollIntervalMs: 0.5 }), /pollIntervalMs/);
  assert.throws(() => resolveRelayOptions({ ...base, kafkaBrokers: [] }), /kafkaBrokers: needs at least one/);
  assert.throws(() => resolveRelayOptions({ ...base, schema: 'a;b' }), /schema/);
});

test('backoff is full jitter under an exponential ceiling', () => {
  assert.equal(backoffDelayMs(0, 100, 30_000, () => 0.999999), 99);
  assert.equal(backoffDelayMs(3, 100, 30_000, () => 0.5), 400);
  assert.equal(backoffDelayMs(50, 100, 30_000, () => 0.999999), 29_999);
  assert.equal(backoffDelayMs(5, 100, 30_000, () => 0), 0);
});

test('a schema name with upper-case letters is refused everywhere a schema is given, saying why', async () => {
  const { quoteSchema, schemaNameProblem } = await import('../../src/shared/identifiers.js');
  const { migrationScript } = await import('../../src/commands/migrate.js');
  const { roleScript } = await import('../../src/commands/roles.js');
  const { resolveConsumerOptions } = await import('../../src/consumer/options.js');
  assert.equal(schemaNameProblem('tenant_a'), undefined);
  assert.match(schemaNameProblem('Mb')!, /"Mb" has upper-case letters: Postgres folds unquoted names to lower case.*use "mb"/);
  assert.throws(() => readSetting(schema, 'Mb', {}), /^ConfigError: --schema: "Mb" has upper-case letters/);
  assert.throws(() => readSetting(schema, undefined, { OUTBOX_SCHEMA: 'MB' }), /^ConfigError: OUTBOX_SCHEMA: "MB" has upper-case/);
  assert.throws(() => quoteSchema('Mb'), /^ConfigError: schema: "Mb" has upper-case/);
  await assert.rejects(migrationScript('Mb'), /schema: "Mb" has upper-case/);
  await assert.rejects(roleScript('Mb'), /schema: "Mb" has upper-case/);
  const base = { databaseUrl: 'postgres://h/db', kafkaBrokers: ['h:9092'] };
  assert.throws(() => resolveRelayOptions({ ...base, schema: 'Mb' }), /^ConfigError: schema: "Mb" has upper-case/);
  assert.throws(() => resolveConsumerOptions({ ...base, groupId: 'g', topics: ['t'], handler: async () => undefined, schema: 'Mb' } as never), /schema: "Mb" has upper-case/);
  // Other identifiers keep their case: a role may be "Relay" if the DBA wants it so.
  assert.equal(quoteIdentifier('Relay', 'relayRole'), '"Relay"');
});

test('a *_FILE secret that cannot be read or is not acceptable is refused without its content', () => {
  const dir = mkdtempSync(join(tmpdir(), 'outbox-'));
  const file = join(dir, 'pw');
  writeFileSync(file, 'not-a-url-hunter2-secret\n');
  assert.throws(() => readSetting(databaseUrl, undefined, { DATABASE_URL_FILE: file }), (e: Error) => /^DATABASE_URL_FILE: is not a URL/.test(e.message) && !e.message.includes('hunter2'));
  assert.throws(() => readSetting(databaseUrl, undefined, { DATABASE_URL_FILE: dir }), (e: Error) => e.message === `DATABASE_URL_FILE: cannot read ${dir}: EISDIR`);
});

test('TLS files must hold the PEM block they are for; a key must fit its certificate; the content is never quoted', async () => {
  const { kafkaSecurityConfig } = await import('../../src/shared/kafkaSecurity.js');
  const dir = mkdtempSync(join(tmpdir(), 'outbox-tls-'));
  const secret = join(dir, 'password');
  writeFileSync(secret, 'hunter2-secret-Passw0rd\n');
  const fakeCert = join(dir, 'cert.pem');
  writeFileSync(fakeCert, '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n');
  const fakeKey = join(dir, 'key.pem');
  writeFileSync(fakeKey, '-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n');
  const refused = (options: Parameters<typeof kafkaSecurityConfig>[0], pattern: RegExp): void =>
    assert.throws(() => kafkaSecurityConfig(options), (e: unknown) => e instanceof ConfigError && pattern.test(e.message) && !e.message.includes('hunter2'));
  // Node would take a CA file without a certificate in it and fall back to the system CAs.
  refused({ kafkaSslCaFile: secret }, /^kafkaSslCaFile: .*password holds no PEM certificate/);
  refused({ kafkaSslCertFile: secret, kafkaSslKeyFile: fakeKey }, /^kafkaSslCertFile: .* holds no PEM certificate/);
  refused({ kafkaSslCertFile: fakeCert, kafkaSslKeyFile: secret }, /^kafkaSslKeyFile: .* holds no PEM private key/);
  refused({ kafkaSslCertFile: fakeCert, kafkaSslKeyFile: fakeKey }, /^kafkaSslCertFile: is not a certificate TLS can use \(error:/);
  assert.deepEqual(kafkaSecurityConfig({ kafkaSslCaFile: fakeCert }).ssl, { ca: [readFileSync(fakeCert, 'utf8')] }, 'a CA file with a certificate block is taken');
  // A real certificate with its own key passes; with another key it is refused up front.
  const cert = join(dir, 'real-cert.pem');
  const key = join(dir, 'real-key.pem');
  const otherKey = join(dir, 'other-key.pem');
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', cert, '-days', '1', '-subj', '/CN=outbox-test'], { stdio: 'ignore' });
  writeFileSync(otherKey, generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }));
  assert.ok(kafkaSecurityConfig({ kafkaSslCertFile: cert, kafkaSslKeyFile: key }).ssl);
  refused({ kafkaSslCertFile: cert, kafkaSslKeyFile: otherKey }, /^kafkaSslKeyFile: is not the private key of the client certificate \(.*key values mismatch\)/);
});
