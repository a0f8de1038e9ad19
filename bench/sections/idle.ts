/**
 * 17. The idle relay alone (issue 34 item 7): section 9's idle arm (bench/sections/relayCost.ts,
 * `idleArm`) in `rounds` rounds, each a fresh schema and a relay child at its defaults that
 * published one row first: % of a core of the relay process and of its Postgres backends
 * over a quiet window (utime + stime from /proc), then pick-up at 50 rows/s and after
 * silence, so that a cheaper idle relay is seen not to pick up later. Without section 9's
 * drains it takes minutes, not half an hour: `npm run bench -- --only idle`.
 */
import type pg from 'pg';
import { row, type Row, type SectionResult } from '../report.js';
import { fmt, median } from '../util.js';
import { idleArm, type RelayCostData } from './relayCost.js';

const S = '17. idle relay';

export interface IdleData {
  seconds: number;
  rounds: Array<RelayCostData['idle']>;
  median: { relayPct: number; postgresPct: number; totalPct: number; pickUpP50: number; afterSilenceP50: number; afterSilenceP95: number };
}

export async function idle(pool: pg.Pool, o: { seconds: number; rounds: number }): Promise<SectionResult<IdleData>> {
  const rounds: Array<RelayCostData['idle']> = [];
  for (let i = 0; i < o.rounds; i++) rounds.push(await idleArm(pool, o.seconds));
  const m = {
    relayPct: median(rounds.map((r) => r.relayPct)),
    postgresPct: median(rounds.map((r) => r.postgresPct)),
    totalPct: median(rounds.map((r) => r.relayPct + r.postgresPct)),
    pickUpP50: median(rounds.map((r) => r.pickUp.p50)),
    afterSilenceP50: median(rounds.map((r) => r.afterSilence.p50)),
    afterSilenceP95: median(rounds.map((r) => r.afterSilence.p95)),
  };
  const each = rounds.map((r) => `${fmt(r.relayPct, 2)} + ${fmt(r.postgresPct, 2)}`).join('; ');
  const rows: Row[] = [
    row(S, `idle ${o.seconds} s, median of ${o.rounds}: relay process + its backends, % of a core`, `${fmt(m.relayPct, 2)} + ${fmt(m.postgresPct, 2)} = ${fmt(m.totalPct, 2)} (rounds ${each})`, '≤ 1.0', m.totalPct <= 1.0),
    row(S, `pick-up at 50 rows/s offered, median of ${o.rounds}: commit → ack p50`, `${fmt(m.pickUpP50, 1)} ms`, 'p50 ≤ 15', m.pickUpP50 <= 15),
    row(S, `pick-up after silence (single rows 0.2-1.5 s apart), median of ${o.rounds}: commit → ack`, `p50 ${fmt(m.afterSilenceP50, 1)} / p95 ${fmt(m.afterSilenceP95, 1)} ms`),
  ];
  return { data: { seconds: o.seconds, rounds, median: m }, rows };
}
