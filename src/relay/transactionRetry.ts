// How soon the exactly-once units' requests are tried again (./platformaticUnit.ts, ./progressCommit.ts).

/** Retries of a transaction's requests: with the delays below, about 4 s in all. */
export const TRANSACTION_RETRIES = 12;

/**
 * Delay before the client's retry of a request: soon at first, doubling to at most 1 s.
 * Kafka answers a transaction's first AddPartitionsToTxn CONCURRENT_TRANSACTIONS while the
 * previous transaction's commit markers are still being written, nearly every time a unit
 * begins its next transaction at once, for a few milliseconds; the client's retry after
 * 50 ms made that step 54 of a send's 64 ms (p50, 50-message sends on one broker).
 */
export function transactionRetryDelayMs(_client: unknown, _operationId: string, attempt: number): number {
  return Math.min(2 * 2 ** Math.max(0, attempt - 1), 1_000);
}
