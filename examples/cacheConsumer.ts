// A consumer that keeps a Redis cache of the rows it updates, right: the row changes in the
// message's transaction (only if the event is newer than the row), and the cache is written
// after the COMMIT (ctx.afterCommit) with setIfNewer, so a redelivered or late event never
// puts an older profile back. Readers go through getOrLoad: one database load per expiry of
// a hot key, whatever the number of readers and processes.
//
//   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test KAFKA_BROKERS=127.0.0.1:19092 \
//   REDIS_URL=redis://127.0.0.1:6379 CONSUMER_TOPIC=profiles npx tsx examples/cacheConsumer.ts
//
// Environment:
//   DATABASE_URL     Postgres (required); run `outbox-relay migrate` on OUTBOX_SCHEMA first
//   KAFKA_BROKERS    comma-separated host:port (required)
//   REDIS_URL        Redis (default redis://127.0.0.1:6379); needs the `redis` package
//   OUTBOX_SCHEMA    schema of processed_messages and of example_profiles (default public)
//   CONSUMER_TOPIC   topic to consume (required)
//   CONSUMER_GROUP   consumer group (default example-cache-consumer)
//   STOP_AFTER       stop after this many messages were handled; then print the profiles
//                    as readers see them (through the cache)
//
// Messages are JSON, e.g. {"version": 3, "name": "Ada"}, keyed by the profile id; the
// version is the entity's version (an outbox id or a row version works).
import pg from 'pg';
import { Registry } from 'prom-client';
import { createClient } from 'redis';
import { createConsumer, createLogger, quoteIdentifier } from '../src/index.js';
import { createCache } from '../src/cache/index.js';

const env = process.env;
for (const name of ['DATABASE_URL', 'KAFKA_BROKERS', 'CONSUMER_TOPIC']) {
  if (!env[name]) {
    process.stderr.write(`examples/cacheConsumer: ${name} is required\n`);
    process.exit(2);
  }
}
const schema = quoteIdentifier(env.OUTBOX_SCHEMA ?? 'public', 'OUTBOX_SCHEMA');
const stopAfter = env.STOP_AFTER ? Number(env.STOP_AFTER) : Infinity;
const logger = createLogger('info');
const pool = new pg.Pool({ connectionString: env.DATABASE_URL, max: 5 });
await pool.query(`CREATE TABLE IF NOT EXISTS ${schema}.example_profiles (id text PRIMARY KEY, version bigint NOT NULL, name text NOT NULL)`);

const redis = createClient({ url: env.REDIS_URL ?? 'redis://127.0.0.1:6379' });
redis.on('error', (err: Error) => logger.warn({ err: err.message }, 'redis'));
await redis.connect();

interface Profile {
  id: string;
  version: number;
  name: string;
}

const registry = new Registry(); // outbox_cache_* metrics; serve it on /metrics as examples/consumer.ts does
const profiles = createCache({ client: redis, prefix: 'example:profile:', name: 'profiles', registry, defaults: { ttlMs: 5 * 60_000, staleForMs: 30_000, lockTtlMs: 2_000 } });

/** The read path of the service: the cache, else the database (one load per key at a time). */
export function readProfile(id: string): Promise<Profile | null> {
  return profiles.getOrLoad<Profile | null>(
    id,
    async ({ signal }) => {
      const { rows } = await pool.query<{ version: string; name: string }>({ text: `SELECT version, name FROM ${schema}.example_profiles WHERE id = $1`, values: [id] });
      if (signal.aborted) throw signal.reason;
      return rows[0] ? { id, version: Number(rows[0].version), name: rows[0].name } : null;
    },
    { versionOf: (p) => p?.version ?? 0 },
  );
}

const seen = new Set<string>();
const consumer = createConsumer<{ version?: unknown; name?: unknown }>({
  kafkaBrokers: (env.KAFKA_BROKERS as string).split(','),
  groupId: env.CONSUMER_GROUP ?? 'example-cache-consumer',
  topics: env.CONSUMER_TOPIC as string,
  pool,
  schema: env.OUTBOX_SCHEMA ?? 'public',
  decode: 'json',
  logger,
  handler: async (message, ctx) => {
    const id = message.key ?? '';
    const { version, name } = message.value ?? {};
    if (!Number.isSafeInteger(version) || typeof name !== 'string') throw new Error(`not a profile event: ${JSON.stringify(message.value)}`);
    const profile: Profile = { id, version: version as number, name };
    seen.add(id);
    // The row: only a newer event changes it.
    await ctx.client.query(
      `INSERT INTO ${schema}.example_profiles (id, version, name) VALUES ($1, $2, $3)
       ON CONFLICT (id) DO UPDATE SET version = EXCLUDED.version, name = EXCLUDED.name WHERE example_profiles.version < EXCLUDED.version`,
      [id, profile.version, profile.name],
    );
    // The cache: after the commit, and only if newer than what it holds. A crash before the
    // hook leaves the cache one version behind until the entry expires or a later event
    // writes it (the database is right either way); use invalidate(id, version) instead to
    // have readers reload.
    ctx.afterCommit(() => profiles.setIfNewer(id, profile, profile.version));
  },
});

let stopping = false;
const stop = async (why: string): Promise<void> => {
  if (stopping) return;
  stopping = true;
  logger.info({ why }, 'stopping');
  const { hard } = await consumer.stop();
  for (const id of [...seen].sort()) logger.info({ profile: await readProfile(id) }, 'profile as readers see it');
  await profiles.whenIdle();
  await redis.close();
  await pool.end();
  logger.info({ hard, ...consumer.stats() }, 'example cache consumer stopped');
  logger.flush();
  process.exit(hard ? 3 : 0);
};
process.on('SIGTERM', () => void stop('SIGTERM'));
process.on('SIGINT', () => void stop('SIGINT'));
consumer.on('offsetCommitted', () => {
  const s = consumer.stats();
  if (s.processed + s.duplicates + s.deadLettered >= stopAfter) void stop(`STOP_AFTER=${stopAfter} messages handled`);
});

await consumer.start();
logger.info({ topic: env.CONSUMER_TOPIC, groupId: consumer.options.groupId }, 'example cache consumer running');
