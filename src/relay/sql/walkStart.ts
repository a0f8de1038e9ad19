/**
 * Where a walk of the unsent-row index starts: above `from` only while
 * outbox_claim_floors.generation, read in the statement's own snapshot, is still
 * `generation`; else from the lowest id. The claims (./claim.ts), the low-water walk
 * (./lowWater.ts) and the metrics sampler (src/metrics/sql/metrics.ts) start this way.
 *
 * Rows come back below ids a walk has passed only with a bump of that generation: a dead
 * letter replayed under its old id, a parked key released (the triggers of
 * sql/005_claim_floors.sql), a partition attached again (../partitionReattach.ts, which
 * also covers statements planned before the ATTACH). From 0 a walk also steps over every
 * entry of a row published since the oldest open snapshot (vacuum may not remove them
 * yet): a handful normally, millions under a held horizon.
 *
 * `from` and `generation` are SQL expressions: parameters ($6) or checked literals (./literals.ts).
 */
export function walkStartSql(quotedSchema: string, from: string, generation: string): string {
  return `(CASE WHEN (SELECT generation FROM ${quotedSchema}.outbox_claim_floors) = ${generation}::bigint THEN ${from}::bigint ELSE 0 END)`;
}
