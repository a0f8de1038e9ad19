import { liveLeasesSql } from './leases.js';
import { bigintLiteral, intArrayLiteral, intLiteral, textLiteral } from './literals.js';
import { walkStartSql } from './walkStart.js';

/**
 * Claim the next batch of unsent rows of some shards, oldest first.
 *
 * $1 bigint     horizon: highest id known to be final (no transaction can still commit
 *               a row at or below it; src/horizon.ts)
 * $2 smallint[] shards the claiming worker handles
 * $3 int        batch size
 * $4 text       relay id: only shards it holds a live lease on are claimed (its heartbeat
 *               within its TTL: ./leases.ts, liveLeasesSql)
 * $5 timestamptz server start time the horizon was computed on: after a restart the
 *               watermark no longer holds (see src/horizon.ts), and this claim finds nothing
 * $6 bigint     floor: the scan starts above it (src/relay/floor.ts says why that is safe)
 * $7 bigint     the outbox_claim_floors generation the floor was computed under; under any
 *               other (a dead letter replayed, a parked key released since) the scan
 *               starts from the lowest id instead
 *
 * Each row also says whether every shard of $2 was leased to the relay when the claim ran
 * (all_leased): a shard whose lease had lapsed (a late renewal) has its rows skipped by the
 * lease check, so a claim that saw one must not raise the worker's floor over them; and
 * the outbox_claim_floors generation (generation, text: bigint) in the claim's own
 * statement snapshot, the one $7 is compared in, for the floor the claim produces
 * (floor.ts: a release or replay after this snapshot bumps it past this value).
 *
 * Rows of a parked key (its dead letter waits for an operator) are left where they are,
 * in order, until the key is released.
 *
 * Shard ownership is what keeps one key's rows in one relay's hands; SKIP LOCKED is the
 * safety net, leaving rows another transaction holds to it instead of waiting.
 * payload goes out as text so the relay forwards the stored JSON without parsing it.
 * created_at_text is the text of a created_at no Kafka timestamp can hold (before 1970,
 * past JavaScript's last date, ±infinity), in UTC, for its header (../message.ts); node-pg
 * turns the last two into numbers or an Invalid Date, which keep nothing of the value.
 *
 * The lease check is an array, not `shard IN (subquery)`: as a semi-join the planner
 * hashes the leases and then reads every unsent row and sorts them (242 ms per claim on
 * a 200,000-row backlog); as a constant array it walks the unsent-row index in id order
 * and stops at the batch size (1.4 ms).
 *
 * The floor keeps a claim's cost flat while a snapshot older than the drain is open (a
 * REPEATABLE READ report, a pg_dump): the index entries of the rows published since
 * cannot be removed, and a scan from the lowest id walked every one of them (measured
 * 4,461 against 14,853 rows/s on a 1,000,000-row drain). The plan itself is fixed by
 * {@link BATCH_SETTINGS_SQL}.
 */
export function claimSql(quotedSchema: string): string {
  return `
SELECT id, message_id, topic, key, payload::text AS payload, payload_bytes, headers, created_at,
       CASE WHEN created_at < '1970-01-01 00:00:00+00' OR created_at >= '275760-09-13 00:00:00+00'
            THEN timezone('UTC', created_at)::text END AS created_at_text,
       (SELECT count(*) FROM (${liveLeasesSql(quotedSchema, '$4')}) AS live
         WHERE live.shard = ANY($2::smallint[])) = cardinality($2::smallint[]) AS all_leased,
       (SELECT generation::text FROM ${quotedSchema}.outbox_claim_floors) AS generation
  FROM ${quotedSchema}.outbox
 WHERE sent_at IS NULL
   AND id <= $1
   AND id > ${walkStartSql(quotedSchema, '$6', '$7')}
   AND shard = ANY($2::smallint[])
   AND shard = ANY (ARRAY(${liveLeasesSql(quotedSchema, '$4')}))
   AND pg_postmaster_start_time() = $5::timestamptz
   AND NOT EXISTS (SELECT 1 FROM ${quotedSchema}.outbox_parked_keys AS p
                    WHERE p.topic = outbox.topic AND p.key = outbox.key)
 ORDER BY id
 LIMIT $3
   FOR UPDATE OF outbox SKIP LOCKED`;
}

/** The claim's prepared statement, per connection (see {@link prepareClaimSql}). */
export const CLAIM_STATEMENT = 'outbox_relay_claim';

/**
 * Prepare {@link claimSql} on a connection, once: each batch then only executes it, with no
 * parsing and, under the batch settings, no planning either (one generic plan, built
 * under the same settings; measured at 1,000 rows/s: parse and plan were half the claim's
 * Postgres time). A simple query (no parameters); runs outside a transaction.
 */
export function prepareClaimSql(quotedSchema: string): string {
  return `PREPARE ${CLAIM_STATEMENT} (bigint, smallint[], int, text, timestamptz, bigint, bigint) AS ${claimSql(quotedSchema)}`;
}

/**
 * The plan settings of a batch's transaction, for this transaction only (SET LOCAL:
 * nothing else on the connection sees them).
 *
 * The claim, the mark, the delete and the dead-letter move must take the same plan on a
 * never-analyzed table, a 10,000- and a 10,000,000-row backlog (test/planShapes.integration.test.ts).
 * Rewriting them is not enough for the claim: with no statistics (a new deployment, a
 * fresh schema, a backfill) the planner estimates `sent_at IS NULL` at 0.5 % of the rows
 * and picks "bitmap scan of every unsent row, then sort" over walking the unsent-row index
 * in id order and stopping at the batch size (200,000 unsent rows: 243-510 ms per claim,
 * an external merge sort, against 1.8 ms). The alternatives that need no setting were
 * measured and are worse: a LATERAL index scan per shard reads up to a batch per shard
 * (64,000 entries for a 500-row batch over 128 shards, 53 ms); a UNION ALL per shard
 * under a Merge Append has the right plan but costs ~10 ms to plan per claim. So, as a
 * last resort: no sort, no bitmap scan and no sequential scan, which leaves the ordered
 * index scan for the claim, a plain index scan of the primary key for the others, and an
 * index probe of the parked keys per claimed row. jit off as well: a statement that has
 * to sort or scan anyway (the dead-letter move's DISTINCT ON, the one-row floors table)
 * is then costed above jit_above_cost, and compiling it took 300-700 ms here.
 *
 * plan_cache_mode: the prepared claim and mark take their generic plan, built once (at
 * their first execution, or again after an ANALYZE invalidated it) and always inside a
 * batch's transaction, so under these same settings; the plan shapes test checks that
 * generic plan. Without it, Postgres plans the first five executions afresh and may keep
 * doing so. enable_seqscan is off for the generic plan's sake: without values it chose a
 * sequential scan of the parked keys per claimed row on one of the three outboxes the
 * plan shapes test builds (an index probe on the others); a planned-for-values claim never
 * did.
 */
export const BATCH_SETTINGS_SQL =
  'SET LOCAL enable_sort = off; SET LOCAL enable_bitmapscan = off; SET LOCAL enable_seqscan = off; SET LOCAL jit = off; SET LOCAL plan_cache_mode = force_generic_plan';

/** The arguments of one claim ({@link claimSql} has what each means). */
export interface ClaimArguments {
  watermark: number;
  shards: readonly number[];
  batchSize: number;
  relayId: string;
  incarnation: string;
  floor: number;
  generation: string;
}

/** The claim's arguments as SQL literals, in parameter order ($1..$7 of {@link claimSql}). */
export function claimLiterals(a: ClaimArguments): string[] {
  return [
    bigintLiteral(a.watermark),
    intArrayLiteral(a.shards, 'smallint'),
    intLiteral(a.batchSize),
    textLiteral(a.relayId),
    `${textLiteral(a.incarnation)}::timestamptz`,
    bigintLiteral(a.floor),
    bigintLiteral(a.generation),
  ];
}

/** Execute the prepared claim ({@link prepareClaimSql}) with its arguments written as literals (./literals.ts). */
export function executeClaimSql(a: ClaimArguments): string {
  return `EXECUTE ${CLAIM_STATEMENT}(${claimLiterals(a).join(', ')})`;
}

/**
 * Begin a batch's transaction, fix its plans and claim, in one round trip: a simple query
 * (no parameters: {@link executeClaimSql} writes them as integers and quoted strings). The
 * claimed rows are the last result; `prepare` (the PREPAREs of a connection's first batch)
 * goes before BEGIN. The message starts with the relay's
 * {@link batchMarker}, which is how a relay taking its shards over finds its transaction.
 */
export function beginClaimSql(a: ClaimArguments, prepare = ''): string {
  return `${batchMarker(a.relayId)} ${prepare}BEGIN; ${BATCH_SETTINGS_SQL}; ${executeClaimSql(a)}`;
}

/**
 * {@link beginClaimSql} without a prepared statement, for connections that go through a
 * transaction-pooling proxy (PgBouncer's pool_mode = transaction): there, consecutive
 * transactions of one client run on different server sessions, so a statement prepared in
 * one is missing (or another client's) in the next. The claim's full text goes in every
 * batch with the arguments written in place, still one round trip; Postgres parses and
 * plans it each time (the cost the bench's pooler section measures).
 */
export function beginClaimInlineSql(quotedSchema: string, a: ClaimArguments): string {
  return `${batchMarker(a.relayId)} BEGIN; ${BATCH_SETTINGS_SQL}; ${bindLiterals(claimSql(quotedSchema), claimLiterals(a))}`;
}

/**
 * Claim again inside a batch's open transaction (exactly-once mode's transaction interval,
 * ../claimsInTransaction.ts), after `before` (the mark of what the previous claim
 * published, ./markSent.ts): one round trip, the claimed rows the last result.
 */
export function claimAgainSql(quotedSchema: string, a: ClaimArguments, inline: boolean, before = ''): string {
  const claim = inline ? bindLiterals(claimSql(quotedSchema), claimLiterals(a)) : executeClaimSql(a);
  return `${batchMarker(a.relayId)} ${before ? `${before}; ` : ''}${claim}`;
}

/**
 * The comment every statement of a relay's batch transaction starts with. pg_stat_activity
 * shows a backend's current or last statement, so a backend inside a transaction whose
 * statement starts with it is running that relay's batch, whatever connection pooling
 * sits between: how a relay taking shards over fences the stale owner's batches
 * (sql/leases.ts) without touching connections a pooler has handed to someone else. The
 * relay id is twelve hex digits (Relay.instanceId); anything else is refused here.
 */
export function batchMarker(relayId: string): string {
  if (!/^[A-Za-z0-9_-]{1,64}$/.test(relayId)) throw new TypeError(`not a relay id: ${JSON.stringify(relayId)}`);
  return `/* outbox-relay batch ${relayId} */`;
}

/**
 * `sql` with its parameters $1..$n replaced by `literals` (checked SQL literals, ./literals.ts).
 * Only for the relay's own statement texts, which hold no `$` but in their parameters (a
 * unit test checks each one).
 */
export function bindLiterals(sql: string, literals: readonly string[]): string {
  return sql.replace(/\$(\d+)/g, (_, n: string) => {
    const literal = literals[Number(n) - 1];
    if (literal === undefined) throw new TypeError(`no value for parameter $${n}`);
    return `(${literal})`;
  });
}

export interface ClaimedRow {
  id: number;
  message_id: string;
  topic: string;
  key: string;
  payload: string | null;
  payload_bytes: Buffer | null;
  headers: Record<string, unknown> | null;
  /** A Date; `Infinity`/`-Infinity` for ±infinity, an Invalid Date past year 275760 (node-pg). */
  created_at: Date;
  /** created_at as Postgres prints it in UTC (without the offset) when no Kafka timestamp can hold it, else null. */
  created_at_text?: string | null;
  /** See {@link claimSql}. */
  all_leased?: boolean;
  generation?: string;
}
