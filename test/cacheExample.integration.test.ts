// docs/cache.md calls examples/cacheConsumer.ts "a runnable version" of its quick start: run
// it, as its header says, on real Postgres, Kafka and Redis, with a late and a redelivered
// event, and check that readers see the newest profile through the cache.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { createTopic, testBrokers } from './helpers/kafka.js';
import { produce } from './helpers/consumer.js';
import { spawnTs } from './helpers/processes.js';
import { useRedis, type TestRedis } from './helpers/redis.js';

let db: TestSchema;
let redis: TestRedis;
before(async () => {
  db = await createTestSchema('cacheex');
  redis = await useRedis();
});
after(async () => {
  await redis?.stop();
  await db?.drop();
});

test('examples/cacheConsumer.ts runs: rows and cache end at the newest version, a late and a redelivered event change nothing', async () => {
  const topic = await createTopic(1);
  // The example's prefix is fixed (example:profile:); ids of this run only.
  const [ada, bob] = [uniqueName('ada'), uniqueName('bob')];
  const redelivered = '7c1c4f57-0000-4000-8000-000000000001';
  await produce(topic, [
    { key: ada, value: { version: 1, name: 'Ada 1' } },
    { key: ada, value: { version: 3, name: 'Ada 3' }, messageId: redelivered },
    { key: ada, value: { version: 2, name: 'Ada 2 (late)' } },
    { key: ada, value: { version: 3, name: 'Ada 3' }, messageId: redelivered },
    { key: bob, value: { version: 1, name: 'Bob' } },
  ]);
  const run = spawnTs('examples/cacheConsumer.ts', [], {
    DATABASE_URL: db.databaseUrl,
    KAFKA_BROKERS: testBrokers().join(','),
    REDIS_URL: redis.url,
    OUTBOX_SCHEMA: db.schema,
    CONSUMER_TOPIC: topic,
    CONSUMER_GROUP: uniqueName('cacheex'),
    STOP_AFTER: '5',
  });
  let timer: NodeJS.Timeout | undefined;
  const code = await Promise.race([run.exited, new Promise<string>((resolve) => (timer = setTimeout(() => resolve('still running after 120 s'), 120_000)))]);
  clearTimeout(timer);
  if (code !== 0) run.child.kill('SIGKILL');
  assert.equal(code, 0, run.output().slice(-2000));
  const seen = run
    .output()
    .split('\n')
    .flatMap((line) => {
      try {
        const o = JSON.parse(line) as { msg?: string; profile?: { id: string; version: number; name: string } };
        return o.msg === 'profile as readers see it' && o.profile ? [o.profile] : [];
      } catch {
        return [];
      }
    });
  assert.deepEqual(seen.sort((a, b) => a.id.localeCompare(b.id)), [
    { id: ada, version: 3, name: 'Ada 3' },
    { id: bob, version: 1, name: 'Bob' },
  ].sort((a, b) => a.id.localeCompare(b.id)));
  const { rows } = await db.pool.query<{ id: string; version: string; name: string }>(`SELECT id, version, name FROM "${db.schema}".example_profiles ORDER BY id`);
  assert.deepEqual(rows.map((r) => [r.id, Number(r.version), r.name]).sort(), [[ada, 3, 'Ada 3'], [bob, 1, 'Bob']].sort());
  // The cache holds the newest version, written by the after-commit setIfNewer.
  const cached = await redis.client.hGetAll(`example:profile:${ada}`);
  assert.equal(cached.ver, '3');
  assert.deepEqual(JSON.parse(cached.v!), { id: ada, version: 3, name: 'Ada 3' });
  await redis.client.del([`example:profile:${ada}`, `example:profile:${bob}`]);
});
