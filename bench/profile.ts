/** The sizes of `npm run bench` (full) and `npm run bench -- --quick`. */
export interface Sizes {
  drainRows: number;
  latencySeconds: number;
  consumerMessages: number;
  consumerRounds: number;
  scaleRows: number;
  scaleRounds: number;
  smallBacklog: number;
  bigBacklog: number;
  peerRows: number;
  peerSeconds: number;
  pgbenchSeconds: number;
  pgbenchRounds: number;
  /** Retention section: rows/s offered, seconds of load per arm. */
  retentionRate: number;
  retentionSeconds: number;
  /** Pooler section: backlog rows per drain, drain rounds (arms alternate), seconds of the low-rate pick-up run. */
  poolerRows: number;
  poolerRounds: number;
  poolerPickUpSeconds: number;
  /** Effect guard section: effects per arm and round (in each of its runs), rounds (arms alternate). */
  effects: number;
  effectsRounds: number;
  /** Console section: outbox rows and dead letters of its big tables, calls of each query. */
  consoleOutboxRows: number;
  consoleDeadLetters: number;
  consoleRepeats: number;
  /** Console section's heavy rows (issue 33): dead letters, of them with a 1 MB payload. */
  consoleHeavyDeadLetters: number;
  consoleHeavyRows: number;
  /** Exactly-once section: backlog rows per drain, rounds (arms rotating), seconds of steady load per arm and round. */
  exactlyOnceRows: number;
  exactlyOnceRounds: number;
  exactlyOnceLatencySeconds: number;
  /** Held-horizon section: rows/s offered, seconds clean, of each hold and after each release. */
  heldRate: number;
  heldCleanSeconds: number;
  heldHoldSeconds: number;
  heldAfterSeconds: number;
  /** Many-tenants section: tenant schemas, idle seconds, rows/s and seconds of single rows into random tenants, one tenant's backlog, tenant databases, of them busy, their rows/s each, seconds. */
  tenantSchemas: number;
  encodingRows: number;
  encodingRounds: number;
  tenantIdleSeconds: number;
  tenantRowRate: number;
  tenantLatencySeconds: number;
  tenantBacklogRows: number;
  tenantDatabases: number;
  tenantBusyDatabases: number;
  tenantBusyRate: number;
  tenantBusySeconds: number;
}

export const PROFILES: Record<'quick' | 'full', Sizes> = {
  quick: { drainRows: 20_000, latencySeconds: 6, consumerMessages: 10_000, consumerRounds: 1, scaleRows: 20_000, scaleRounds: 1, smallBacklog: 10_000, bigBacklog: 100_000, peerRows: 1_000, peerSeconds: 20, pgbenchSeconds: 5, pgbenchRounds: 1, retentionRate: 1_000, retentionSeconds: 30, poolerRows: 20_000, poolerRounds: 1, poolerPickUpSeconds: 5, effects: 2_000, effectsRounds: 1, consoleOutboxRows: 1_000_000, consoleDeadLetters: 100_000, consoleRepeats: 20, consoleHeavyDeadLetters: 200_000, consoleHeavyRows: 60, exactlyOnceRows: 20_000, exactlyOnceRounds: 1, exactlyOnceLatencySeconds: 4, heldRate: 500, heldCleanSeconds: 10, heldHoldSeconds: 20, heldAfterSeconds: 15, tenantSchemas: 100, tenantIdleSeconds: 20, tenantRowRate: 3, tenantLatencySeconds: 15, tenantBacklogRows: 100_000, tenantDatabases: 20, tenantBusyDatabases: 2, tenantBusyRate: 100, tenantBusySeconds: 15, encodingRows: 20_000, encodingRounds: 1 },
  full: { drainRows: 200_000, latencySeconds: 20, consumerMessages: 50_000, consumerRounds: 2, scaleRows: 100_000, scaleRounds: 2, smallBacklog: 10_000, bigBacklog: 1_000_000, peerRows: 5_000, peerSeconds: 60, pgbenchSeconds: 10, pgbenchRounds: 3, retentionRate: 4_000, retentionSeconds: 120, poolerRows: 200_000, poolerRounds: 3, poolerPickUpSeconds: 20, effects: 10_000, effectsRounds: 2, consoleOutboxRows: 10_000_000, consoleDeadLetters: 1_000_000, consoleRepeats: 50, consoleHeavyDeadLetters: 200_000, consoleHeavyRows: 110, exactlyOnceRows: 100_000, exactlyOnceRounds: 2, exactlyOnceLatencySeconds: 8, heldRate: 2_000, heldCleanSeconds: 120, heldHoldSeconds: 1_800, heldAfterSeconds: 90, tenantSchemas: 1_000, tenantIdleSeconds: 120, tenantRowRate: 3, tenantLatencySeconds: 60, tenantBacklogRows: 1_000_000, tenantDatabases: 200, tenantBusyDatabases: 20, tenantBusyRate: 100, tenantBusySeconds: 60, encodingRows: 100_000, encodingRounds: 3 },
};
