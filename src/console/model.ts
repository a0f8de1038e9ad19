import type { OutboxLockHolder } from '../relay/lockHolder.js';
import type { DeadLetter, DeadLetterFilter } from '../commands/deadLetterSelection.js';

// What the operator console reads about one outbox: plain data, no HTML. The data layer
// (src/console/data/) fills these from Postgres with capped, index-backed queries; the
// web layer (src/console/web/) renders them. One outbox at a time; the console holds one
// pool per outbox of its list.

/** A count that stops at a cap instead of scanning a big table to the end. */
export interface CappedCount {
  /** Exact when `capped` is false, else the cap (there are at least this many). */
  count: number;
  capped: boolean;
  /**
   * When capped, where known: Postgres' estimate of the whole (the table's row count as of
   * its last VACUUM or ANALYZE), for an "about N" next to the cap.
   */
  estimate?: number;
}

/** One minute of the last hour: rows written into the outbox, and rows published or dead-lettered. */
export interface MinuteFlow {
  /** Start of the minute (UTC). */
  minute: Date;
  /**
   * Rows inserted into the outbox in that minute (ids handed out by its sequence; see
   * data/flow.ts); null when it cannot be told: the minute before has no sequence mark (the
   * first minute a relay recorded), so it is unknown, not zero.
   */
  ingress: number | null;
  /** Rows marked sent in that minute, by every relay. */
  egress: number;
  /** Rows dead-lettered in that minute. */
  deadLettered: number;
  /**
   * Some relay recorded this minute. False: none ran (or none could write), so the three
   * numbers are unknown, not zero. Ingress also needs the minute before recorded.
   */
  recorded?: boolean;
}

/** A relay process working on this outbox, as it last reported itself. */
export interface RelayView {
  relayId: string;
  live: boolean;
  heartbeatAgeSeconds: number;
  startedAt: Date;
  /** Shards with a valid lease, as compact ranges (`0-63,128`). */
  shards: string;
  shardCount: number;
  /** Its Kafka circuit breaker: open means it claims nothing until a probe reaches the broker. */
  breaker: 'closed' | 'open' | 'unknown';
  /** When the breaker opened, when it is open. */
  breakerOpenedAt: Date | null;
}

/** The dashboard of one outbox. */
export interface OutboxOverview {
  /** The outbox's name in the list (the schema's name for a single outbox). */
  name: string;
  schema: string;
  /** Unsent rows, capped. */
  backlog: CappedCount;
  /** Age of the oldest unsent row in seconds; null when nothing is pending. */
  oldestPendingSeconds: number | null;
  /** The oldest open transaction that wrote the outbox (newer rows wait for it); null when none. */
  oldestOutboxWriter?: OutboxLockHolder | null;
  /** The last 60 minutes, oldest first, one entry per minute (zeros where nothing happened). */
  flow: MinuteFlow[];
  parkedKeys: CappedCount;
  relays: RelayView[];
  /** Shards nobody holds a valid lease on, as compact ranges. */
  unownedShards: string;
  deadLetters: {
    total: CappedCount;
    /** By error name and reason, most frequent first (at most 20 groups). */
    byReason: Array<{ errorName: string; reason: string; count: number }>;
    /** By topic, most frequent first (at most 20 topics). */
    byTopic: Array<{ topic: string; count: number }>;
    /**
     * The dead letters both groupings count: the newest ones, up to a cap (capped: the
     * groups describe the newest `count`, not the whole table, which is `total`).
     */
    grouped?: CappedCount;
  };
}

/** The dead-letter filter of the console: the CLI's, plus the error name. */
export interface ConsoleDeadLetterFilter extends DeadLetterFilter {
  /** Exactly this error name (MESSAGE_TOO_LARGE, validation:empty_key). */
  errorName?: string;
}

/** One dead letter whole, with its JSON payload also as text (null: no JSON payload). */
export type DeadLetterDetail = DeadLetter & { payloadText: string | null };

/** One page of dead letters, lowest id first, and where the next page starts. */
export interface DeadLetterPage {
  /**
   * Without payload, payload bytes or headers (null: a list never reads them, a 1 MB
   * payload stays in the table), key and reason cut to 240 characters (the last an
   * ellipsis). {@link DeadLetterDetail} is a dead letter whole.
   */
  deadLetters: DeadLetter[];
  /** Pass as `afterId` for the next page; null on the last page. */
  nextAfterId: number | null;
  /** How many match the filter, capped. */
  matching: CappedCount;
}

/** A parked key: why (its dead letter), since when, and what waits behind it. */
export interface ParkedKeyView {
  topic: string;
  key: string;
  deadLetterId: number;
  reason: string;
  errorName: string;
  parkedAt: Date;
  /** Unsent rows of the key waiting behind it, capped. */
  waiting: CappedCount;
}

/** One page of parked keys, parked longest first. */
export interface ParkedKeyPage {
  parkedKeys: ParkedKeyView[];
  /** Pass as `after` for the next page; null on the last page. */
  next: { parkedAt: Date; topic: string; key: string } | null;
}
