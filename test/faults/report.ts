/**
 * The report of a fault run: what it ran (counted, and checked against its profile by
 * selfCheck.ts), what the checker found, the verdict; printed as a table and saved as
 * JSON under bench/results/ (child logs in the .logs/ folder next to it). And the summary
 * of a whole command.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { CheckResult } from './checker.js';
import type { Plant, Producer, Profile } from './profiles.js';
import { formatLine, type SelfCheckLine } from './selfCheck.js';
import { ROOT, type CodeVersion } from './snapshot.js';
import type { WorkloadStats } from './workload.js';

export const RESULTS = join(ROOT, 'bench/results');

export interface RunReport {
  name: string;
  code: CodeVersion;
  profile: string;
  plant: Plant;
  /** The relays' producer adapter (--producer); the self-check says whether they ran it. */
  producer: Producer;
  seed: number;
  command: string;
  settings: Profile;
  /** What ran, against what the profile says: any mismatch fails the run. */
  selfCheck: SelfCheckLine[];
  schedule: string[];
  faultsInjected: Record<string, number>;
  faultsFailed: string[];
  /** Cluster nodes SIGKILLed (leaders marked with the partition they led). */
  brokerKills?: Array<{ node: number; ledPartition?: number; failoverMs?: number; recoveredMs: number }>;
  /** PgBouncer restarts (pooler profiles): how, the pids before and after, how long. */
  pgbouncerRestarts?: Array<{ mode: 'kill' | 'clean'; fromPid: number; toPid: number; backMs: number }>;
  workload: Omit<WorkloadStats, 'committed' | 'rolledBack' | 'unknown'> & { committed: number; rolledBack: number; unknown: number };
  drained: boolean;
  /** From the end of the last fault (restart done, pause over) to every committed row applied. */
  drainAfterLastFaultMs: number | null;
  /** From the later of the last fault and the last write to every committed row applied. */
  drainAfterQuietMs: number | null;
  processes: Record<string, { starts: number; unexpectedExits: number; exitCodes: Array<number | string> }>;
  check: CheckResult;
  /** Tenant profiles: messages on a wrong tenant's topic, each tenant's rows, the relays' connections as sampled. */
  tenants?: {
    wrongTenant: number;
    perTenant: Array<{ tenant: string; trigger: boolean; added: boolean; dropped: boolean; committed: number; delivered: number; lost: number; reorderings: number }>;
    budget: { samples: number; most: number[]; mostByName: number[]; mostTenantsAtOnce: number[]; unnamed: Record<string, number>; overBudget: string[]; overTenants: string[] };
  };
  /** Checker violations, "not drained", and self-check mismatches. */
  violations: string[];
  ok: boolean;
  wallMs: number;
  logs: string;
}

export function printReport(r: RunReport): void {
  const c = r.check;
  // Without consumers (the tenant profiles) nothing applied effects: not judged.
  const effects = (n: number): string | number => (r.settings.consumers === 0 ? 'not judged (no consumers)' : n);
  const rows: Array<[string, string | number]> = [
    ['seed', r.seed],
    ['code', `${r.code.commit.slice(0, 12)}${r.code.uncommitted.length ? ` + ${r.code.uncommitted.length} uncommitted src/sql files` : ''}`],
    ['plant', r.plant],
    ['producer adapter (relays)', `${r.producer} (ran: see self-check)`],
    ['Postgres for relays, consumers, writers', r.settings.pooler ? `through PgBouncer, ${r.settings.pooler} pooling (ran: see self-check)` : 'direct'],
    ['relays / consumers / partitions', `${r.settings.relays} / ${r.settings.consumers} / ${r.settings.partitions} (profile; ran: see self-check)`],
    ['faults injected', Object.entries(r.faultsInjected).map(([k, v]) => `${k} ${v}`).join(', ') || 'none'],
    ['transactions (writers)', r.workload.transactions],
    ['rows committed (outbox table)', c.committedRows],
    ['rows rolled back (writers)', c.rolledBackRows],
    ['unknown-outcome rows: committed / absent', `${c.unknownCommitted} / ${c.unknownAbsent}`],
    ['messages on the wire', c.wireMessages],
    ['LOST (committed, never delivered)', c.lost],
    ['ROLLED-BACK DELIVERED', c.rolledBackDelivered],
    ['wire duplicates', c.wireDuplicates],
    ['DUPLICATE EFFECTS', effects(c.duplicateEffects)],
    ['MISSING EFFECTS', effects(c.missingEffects)],
    ['PER-KEY REORDERINGS (wire, first delivery)', c.reorderings],
    ['effect reorderings (informational)', effects(c.effectReorderings)],
    ['committed by writer but not in table', c.committedMissingInDb],
    ['malformed / keys split over partitions', `${c.malformed} / ${c.keysSplit}`],
    ...(r.tenants
      ? ([
          ["MESSAGES ON A WRONG TENANT'S TOPIC", r.tenants.wrongTenant],
          ...r.tenants.perTenant.map((t): [string, string] => [`  tenant ${t.tenant}${t.added ? ' (added)' : ''}${t.dropped ? ' (dropped)' : ''}`, `${t.committed} committed, ${t.delivered} delivered, ${t.lost} lost, ${t.reorderings} reordered; ${t.trigger ? 'insert trigger' : 'no trigger'}`]),
        ] as Array<[string, string | number]>)
      : []),
    ['drained', r.drained ? 'yes' : 'NO'],
    ['drain after last fault (ms)', r.drainAfterLastFaultMs ?? '-'],
    ['drain after last fault or write (ms)', r.drainAfterQuietMs ?? '-'],
    ['process restarts after unexpected exits', Object.values(r.processes).reduce((n, x) => n + x.unexpectedExits, 0)],
    ['wall time (s)', (r.wallMs / 1000).toFixed(1)],
    ['verdict', r.ok ? 'PASS' : `FAIL: ${r.violations.join(', ')}`],
  ];
  const width = Math.max(...rows.map(([k]) => k.length));
  const out = (line: string): void => void process.stdout.write(`${line}\n`);
  out(`\n=== fault run ${r.name} ===`);
  out('  self-check, what ran against the profile:');
  for (const l of r.selfCheck) out(`    ${formatLine(l)}`);
  for (const f of r.faultsFailed) out(`    fault failed: ${f}`);
  for (const [k, v] of rows) out(`  ${k.padEnd(width)}  ${v}`);
  for (const [kind, list] of Object.entries(c.examples)) {
    out(`  examples of ${kind}:`);
    for (const e of list) out(`    ${JSON.stringify(e)}`);
  }
  out(`  reproduce: ${r.command}\n  logs: ${r.logs}\n`);
}

export function saveReport(r: RunReport): string {
  mkdirSync(RESULTS, { recursive: true });
  const file = join(RESULTS, `faults-${r.name}.json`);
  writeFileSync(file, JSON.stringify(r, null, 2) + '\n');
  return file;
}

/** One run's line of the summary. A planted run passes when the checker caught its bug
 *  (and it ran what its profile says); a lone planted run (`lone`) is itself a failing
 *  system, so it passes only when nothing shows, which is to say it exits 1. */
export function judge(r: RunReport, lone: boolean): { pass: boolean; what: string } {
  const selfOk = r.selfCheck.every((l) => l.ok);
  const mismatches = r.selfCheck.filter((l) => !l.ok).map((l) => `${l.what} ${l.actual} of ${l.expected}`);
  const selfWhat = selfOk ? '' : `; SELF-CHECK FAILED: ${mismatches.join(', ')}`;
  if (lone || r.plant === 'none') return { pass: r.ok, what: (r.ok ? 'no violations' : r.violations.join(', ')) + (r.plant === 'none' ? '' : selfWhat) };
  const caught = r.plant === 'dedup-off' ? r.check.duplicateEffects : r.plant === 'progress-off' ? r.check.wireDuplicates : r.check.reorderings;
  const label = r.plant === 'dedup-off' ? 'duplicate effects caught' : r.plant === 'progress-off' ? 'wire duplicates caught' : 'reorderings caught';
  return { pass: caught > 0 && selfOk, what: `${label}: ${caught}${selfWhat}` };
}
