/**
 * Store an entity's version if it is newer than the stored one.
 *
 * $1 text    scope (the consumer group by default)
 * $2 text    entity
 * $3 bigint  version
 *
 * Returns one row when the version was stored (apply the event), none when the stored
 * version is the same or newer (a stale event). Either way the row stays locked until the
 * transaction ends, so two handlers of one entity cannot both pass the gate.
 */
export function advanceVersionSql(quotedSchema: string): string {
  return `
INSERT INTO ${quotedSchema}.entity_versions AS v (scope, entity, version)
VALUES ($1, $2, $3)
    ON CONFLICT (scope, entity) DO UPDATE
   SET version = EXCLUDED.version, updated_at = now()
 WHERE v.version < EXCLUDED.version
RETURNING version`;
}
