/**
 * The self-check's details of the faults the injector carried out (harness.ts): how each
 * broker, leader, consumer and relay kill, PgBouncer and Postgres restart and relay stall
 * went, from what the injector recorded.
 */
import type { Injector } from './inject.js';
import type { FaultKind } from './schedule.js';

export function injectedDetails(injector: Injector, o: { exactlyOnce: boolean; transactionTimeoutMs?: number }): Partial<Record<FaultKind, string | undefined>> {
  return {
    'broker-kill': injector.brokerKills.filter((k) => k.ledPartition === undefined).map((k) => `node ${k.node}, back in sync after ${k.recoveredMs} ms`).join('; ') || undefined,
    'leader-kill': injector.brokerKills.filter((k) => k.ledPartition !== undefined).map((k) => `node ${k.node} leading partition ${k.ledPartition}, new leader after ${k.failoverMs} ms, back in sync after ${k.recoveredMs} ms`).join('; ') || undefined,
    'consumer-kill': `${injector.worstMomentKills} killed themselves between the Postgres commit and the offset commit`,
    'relay-kill': o.exactlyOnce ? `${injector.relayWorstMomentKills} killed themselves between a Kafka commit and its Postgres COMMIT` : undefined,
    'pgbouncer-restart': injector.pgbouncerRestarts.map((r) => `${r.mode === 'kill' ? 'SIGKILL' : 'clean stop'} of pid ${r.fromPid}, pid ${r.toPid} serving after ${r.backMs} ms`).join('; ') || undefined,
    'postgres-restart': [
      injector.postgresRestarts.length > 0 ? `counted when pg_postmaster_start_time() moved: ${injector.postgresRestarts.map((r) => `${r.mode === 'immediate' ? 'crash' : 'clean'} ${r.before} -> ${r.after}`).join('; ')}` : '',
      injector.postgresRestartsBehindPooler.length > 0 ? `behind PgBouncer, which stayed up: ${injector.postgresRestartsBehindPooler.map((r) => `pid ${r.pgbouncerPid} before and after`).join('; ')}` : '',
    ].filter(Boolean).join('; ') || undefined,
    'relay-stall': injector.relayStalls.map((s) => `relay ${s.relay}: transaction open ${s.openMs} ms (timeout ${o.transactionTimeoutMs ?? 'default'} ms), refused with ${s.refusal}; the same process committed again ${s.recoveredMs} ms later`).join('; ') || undefined,
  };
}
