import pg from 'pg';
import { migrate } from '../../../src/commands/migrate.js';
const url = 'postgres://postgres@127.0.0.1:5432/test';
const schema = 'leasechk_' + Date.now().toString(36);
await migrate({ databaseUrl: url, schema });
const pool = new pg.Pool({ connectionString: url, max: 3 });
const n = (await pool.query(`SELECT count(*) FROM "${schema}".outbox_shard_leases`)).rows[0].count;
await pool.query(`UPDATE "${schema}".outbox_shard_leases SET owner = 'r1', expires_at = now() + interval '1 hour'`);
const hold = await pool.connect(); await hold.query('BEGIN ISOLATION LEVEL REPEATABLE READ'); await hold.query('SELECT 1');
const q = `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) SELECT ARRAY(SELECT shard FROM "${schema}".outbox_shard_leases WHERE owner = 'r1' AND expires_at > now())`;
const hits = async () => { const c = await pool.connect(); await c.query('BEGIN'); await c.query('SET LOCAL enable_seqscan = off'); const p = (await c.query(q)).rows[0]['QUERY PLAN'][0]; await c.query('COMMIT'); c.release(); return p['Plan']['Shared Hit Blocks'] + ' hits, ' + p['Execution Time'].toFixed(2) + ' ms'; };
console.log('shards', n, 'before renewals:', await hits());
for (let i = 1; i <= 300; i++) { await pool.query(`UPDATE "${schema}".outbox_shard_leases SET expires_at = now() + interval '1 hour' WHERE owner = 'r1'`); if (i % 100 === 0) console.log(i, 'renewals (', (i * 10 / 3 / 60).toFixed(1), 'min at one per 3.3 s):', await hits()); }
await hold.query('ROLLBACK'); hold.release();
console.log('released:', await hits());
await pool.query(`DROP SCHEMA "${schema}" CASCADE`); await pool.end();
