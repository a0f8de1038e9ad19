/**
 * Mark published rows sent. Runs in the claim's transaction, after Kafka acknowledged
 * the batch, so a crash before the commit leaves the rows unsent (published again: at
 * least once) and never sent-but-unpublished.
 *
 * $1 bigint[] ids of the batch
 */
export function markSentSql(quotedSchema: string): string {
  return `
UPDATE ${quotedSchema}.outbox
   SET sent_at = now()
 WHERE id = ANY($1::bigint[])`;
}
