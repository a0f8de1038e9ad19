/**
 * The tenant profiles' own self-check lines, beside selfCheck.ts' (relays, faults, rows):
 * that the run had the tenants its profile says at the start, with and without the
 * insert trigger; that the added tenant was found and served by relays already running,
 * and its rows delivered; that the dropped tenant was released by the relays; that the
 * connection budget was sampled, never exceeded, and full (tenants had to take turns);
 * and that no relay process died by itself. Pure.
 */
import type { Profile } from './profiles.js';
import type { SelfCheckLine } from './selfCheck.js';

/** Connections of one tenant being served at one batch in flight (docs/tenants.md: 2 × 1 + 3). */
export const CONNECTIONS_PER_TENANT = 5;
/** The tenant relay's own connections: control and checks. */
export const OWN_CONNECTIONS = 2;

/** What ran, counted by the tenant harness. */
export interface TenantTally {
  /** The fewest tenants a relay slot's first process found at its start (0 when one never said). */
  tenantsAtStart: number;
  /** Tenant databases with and without the insert trigger, as found in their catalogs at the start. */
  withTrigger: number;
  withoutTrigger: number;
  /** Tenants seen served by some relay process, and by every relay slot's (at some time each). */
  tenantsServed: number;
  tenantsServedByEveryRelay: number;
  /** Relay processes running since before the added tenant existed that served it. */
  addedServedByRunningRelays: number;
  /** Committed rows of the added tenant found on its topic, and how many it committed. */
  addedRowsDelivered: number;
  addedRowsCommitted: number;
  /** Relay processes that knew the dropped tenant and lived on well past its drop (`droppedKnown`),
   *  and those of them that logged its release after the drop. */
  droppedReleased: number;
  droppedKnown: number;
  /** Samples of pg_stat_activity taken. */
  budgetSamples: number;
  /** The most connections one relay process held in one sample. */
  mostConnections: number;
  /** The fewest, over the relay slots, of the most tenants a slot's process served at once. */
  fullBudgetTenants: number;
  /** Relay processes that exited without being asked to. */
  relayExits: number;
}

export function expectedTenantTally(p: Profile): TenantTally {
  const t = p.tenants;
  if (!t) throw new Error('not a tenant profile');
  return {
    tenantsAtStart: t.initial,
    tenantsServed: t.initial + (p.counts.tenantAdds ?? 0),
    // Shared between relay processes (their leases split its shards): at least one tenant.
    tenantsServedByEveryRelay: 1,
    withTrigger: t.initial - t.withoutTrigger.filter((i) => i < t.initial).length,
    withoutTrigger: t.withoutTrigger.filter((i) => i < t.initial).length,
    addedServedByRunningRelays: (p.counts.tenantAdds ?? 0) > 0 ? 1 : 0,
    addedRowsDelivered: 0,
    addedRowsCommitted: 0,
    droppedReleased: 0,
    droppedKnown: (p.counts.tenantDrops ?? 0) > 0 ? 1 : 0,
    // At least one sample a second of writing: a sampler that stopped early shows.
    budgetSamples: Math.floor(p.writeMs / 1_000),
    mostConnections: t.maxDatabaseConnections,
    fullBudgetTenants: Math.floor((t.maxDatabaseConnections - OWN_CONNECTIONS) / CONNECTIONS_PER_TENANT),
    relayExits: 0,
  };
}

const line = (what: string, expected: number, actual: number, ok: boolean, detail?: string): SelfCheckLine => ({ what, expected, actual, ok, ...(detail ? { detail } : {}) });

export function tenantSelfCheck(expected: TenantTally, actual: TenantTally, details: Partial<Record<keyof TenantTally, string>> = {}): SelfCheckLine[] {
  return [
    line('tenants at the start (each relay found)', expected.tenantsAtStart, actual.tenantsAtStart, actual.tenantsAtStart === expected.tenantsAtStart, details.tenantsAtStart),
    line('tenants served by a relay process', expected.tenantsServed, actual.tenantsServed, actual.tenantsServed === expected.tenantsServed, details.tenantsServed),
    line('tenants served by every relay process (at least)', expected.tenantsServedByEveryRelay, actual.tenantsServedByEveryRelay, actual.tenantsServedByEveryRelay >= expected.tenantsServedByEveryRelay, details.tenantsServedByEveryRelay),
    line('tenants with the insert trigger at the start', expected.withTrigger, actual.withTrigger, actual.withTrigger === expected.withTrigger, details.withTrigger),
    line('tenants without the insert trigger at the start', expected.withoutTrigger, actual.withoutTrigger, actual.withoutTrigger === expected.withoutTrigger, details.withoutTrigger),
    line('relay processes running before the tenant was added that served it (at least)', expected.addedServedByRunningRelays, actual.addedServedByRunningRelays, actual.addedServedByRunningRelays >= expected.addedServedByRunningRelays, details.addedServedByRunningRelays),
    // Every row it committed (at least one) on its topic; lost=0 says the same of every tenant, this says it had rows at all.
    line("added tenant's committed rows on its topic", actual.addedRowsCommitted, actual.addedRowsDelivered, expected.addedServedByRunningRelays === 0 || (actual.addedRowsCommitted > 0 && actual.addedRowsDelivered === actual.addedRowsCommitted), details.addedRowsDelivered),
    // Each relay process that knew the tenant and outlived a discovery after its drop released it; at least one such.
    line('relay processes live across the drop that released the dropped tenant', actual.droppedKnown, actual.droppedReleased, expected.droppedKnown === 0 || (actual.droppedKnown >= expected.droppedKnown && actual.droppedReleased === actual.droppedKnown), details.droppedReleased),
    line('pg_stat_activity samples of the relays\' connections (at least)', expected.budgetSamples, actual.budgetSamples, actual.budgetSamples >= expected.budgetSamples, details.budgetSamples),
    line('most Postgres connections of one relay process (at most the budget)', expected.mostConnections, actual.mostConnections, actual.mostConnections > 0 && actual.mostConnections <= expected.mostConnections, details.mostConnections),
    line('tenants served at once by every relay process at its fullest (the budget\'s worth)', expected.fullBudgetTenants, actual.fullBudgetTenants, actual.fullBudgetTenants === expected.fullBudgetTenants, details.fullBudgetTenants),
    line('relay processes that exited by themselves', expected.relayExits, actual.relayExits, actual.relayExits === expected.relayExits, details.relayExits),
  ];
}
