// A unit's progress: the outbox ids the last Kafka transaction of a unit published,
// written in that same transaction as the metadata of a consumer-group offset commit
// (TxnOffsetCommit), so Kafka makes it visible exactly when, and only if, the transaction
// commits; OffsetFetch reads it back. Kafka Streams keeps its input offsets the same way.
//
// The metadata is a string of at most offset.metadata.max.bytes (4,096 by default), so
// the ids go compactly: sorted, as unsigned LEB128 varints of their differences, in
// base64url, after a version tag. A unit's batch holds ids a few apart (an eighth of the
// shards), one byte each: a 500-row batch takes about 700 characters.

const VERSION = 'v1:';

/** Encode sorted, distinct, non-negative integer ids. */
export function encodeProgress(ids: readonly number[]): string {
  const bytes: number[] = [];
  let previous = 0;
  for (const id of ids) {
    if (!Number.isSafeInteger(id) || id < previous) throw new RangeError(`progress ids must be sorted safe integers: ${id} after ${previous}`);
    let delta = id - previous;
    previous = id;
    // LEB128 by arithmetic, not bit operators: ids go past 2^31.
    while (delta >= 0x80) {
      bytes.push((delta % 0x80) + 0x80);
      delta = Math.floor(delta / 0x80);
    }
    bytes.push(delta);
  }
  return VERSION + Buffer.from(bytes).toString('base64url');
}

/**
 * The ids of a progress string; [] for none (no commit yet: Kafka answers null or '').
 * @throws TypeError for a string this relay did not write
 */
export function decodeProgress(metadata: string | null | undefined): number[] {
  if (metadata === null || metadata === undefined || metadata === '') return [];
  if (!metadata.startsWith(VERSION)) throw new TypeError(`not an outbox-relay progress record: ${JSON.stringify(metadata.slice(0, 40))}`);
  const bytes = Buffer.from(metadata.slice(VERSION.length), 'base64url');
  const ids: number[] = [];
  let previous = 0;
  let delta = 0;
  let scale = 1;
  for (const byte of bytes) {
    delta += (byte % 0x80) * scale;
    if (byte >= 0x80) {
      scale *= 0x80;
      continue;
    }
    previous += delta;
    ids.push(previous);
    delta = 0;
    scale = 1;
  }
  if (scale !== 1) throw new TypeError('truncated outbox-relay progress record');
  return ids;
}

/** How many of `ids` (sorted) fit one progress string of at most `maxChars`: a prefix. */
export function progressPrefixFitting(ids: readonly number[], maxChars: number): number {
  let bytes = 0;
  let previous = 0;
  for (let i = 0; i < ids.length; i++) {
    let delta = ids[i]! - previous;
    previous = ids[i]!;
    do {
      bytes++;
      delta = Math.floor(delta / 0x80);
    } while (delta > 0);
    if (VERSION.length + Math.ceil((bytes * 4) / 3) > maxChars) return i;
  }
  return ids.length;
}
