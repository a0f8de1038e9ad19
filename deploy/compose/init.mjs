// One-shot database setup for docker-compose, run in the relay image as the database
// owner: migrate, apply the least-privilege roles (sql/roles.sql), and create the two
// login roles with the passwords from their secret files. Idempotent.
//
// In production a DBA does the same by hand: `outbox-relay migrate --print` and the roles
// script (docs/operations.md).
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { migrate } from '/app/dist/commands/migrate.js';
import { roleScript } from '/app/dist/commands/roles.js';

const secret = (name) => readFileSync(`/run/secrets/${name}`, 'utf8').trim();
const ownerUrl = `postgres://postgres:${encodeURIComponent(secret('postgres_password'))}@postgres:5432/app`;
const schema = process.env.OUTBOX_SCHEMA ?? 'public';

await migrate({ databaseUrl: ownerUrl, schema });
const client = new pg.Client({ connectionString: ownerUrl });
await client.connect();
try {
  await client.query(await roleScript(schema));
  const logins = [
    // The relay: only what sql/roles.sql grants outbox_relay.
    { name: 'outbox_relay_login', group: 'outbox_relay', password: secret('relay_password') },
    // The example consumer is an application: it owns its own tables (CREATE on the
    // schema) and gets the dedup tables through outbox_consumer.
    { name: 'outbox_consumer_login', group: 'outbox_consumer', password: secret('consumer_password'), create: true },
  ];
  for (const login of logins) {
    const exists = await client.query('SELECT 1 FROM pg_roles WHERE rolname = $1', [login.name]);
    const verb = exists.rowCount ? 'ALTER' : 'CREATE';
    const { rows } = await client.query(`SELECT format('${verb} ROLE %I LOGIN PASSWORD %L', $1::text, $2::text) AS sql`, [login.name, login.password]);
    await client.query(rows[0].sql);
    await client.query(`GRANT "${login.group}" TO "${login.name}"`);
    if (login.create) await client.query(`GRANT CREATE ON SCHEMA "${schema}" TO "${login.name}"`);
  }
  console.log(JSON.stringify({ msg: 'database ready', schema }));
} finally {
  await client.end();
}
