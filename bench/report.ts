/**
 * The report of a benchmark run: the rows the sections return, printed as one Markdown
 * table (result, target, met, load average), written as results.json with the run's other
 * facts, and the sections' SVG plots beside it.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { load1 } from './machine.js';
import { lineChart, type ChartOptions } from './svg.js';
import { log } from './util.js';
import type { ArmFacts } from './armFacts.js';

export interface Row {
  section: string;
  what: string;
  value: string;
  target?: string | undefined;
  met?: boolean | undefined;
  /** The 1-minute load average when the result came in: the machine is shared. */
  load1: number;
  /**
   * What ran for this figure, as the relays and consumers reported it (bench/armFacts.ts):
   * the row's own arms when its section names them, else every arm its section started.
   * Absent in summaries written before the bench recorded it.
   */
  ran?: ArmFacts[];
}

export interface Plot {
  /** File name in the results directory. */
  file: string;
  chart: ChartOptions;
}

/** What a section returns: its table rows, its raw figures for results.json, its plots. */
export interface SectionResult<Data = unknown> {
  rows: Row[];
  data: Data;
  plots?: Plot[];
}

/** A table row, stamped with the load average now, and logged as it comes in. */
export function row(section: string, what: string, value: string, target?: string, met?: boolean, ran?: ArmFacts[]): Row {
  const r: Row = { section, what, value, target, met, load1: load1(), ...(ran !== undefined && { ran }) };
  log(`${section} | ${what}: ${value}${target ? ` (target ${target}: ${met ? 'met' : 'NOT met'})` : ''} [load ${r.load1}]`);
  return r;
}

/** bench/results/<stamp>[-<tag>]/ (not committed). */
export function resultsDir(tag?: string): string {
  const stamp = new Date().toISOString().replace(/[:.]/g, '-');
  return fileURLToPath(new URL(`./results/${stamp}${tag ? `-${tag}` : ''}/`, import.meta.url));
}

export function markdownTable(rows: Row[]): string[] {
  const lines = ['| section | what | result | target | met | load |', '|---|---|---|---|---|---:|'];
  for (const r of rows) lines.push(`| ${r.section} | ${r.what} | ${r.value} | ${r.target ?? ''} | ${r.target ? (r.met ? 'yes' : '**no**') : ''} | ${r.load1} |`);
  return lines;
}

/** Writes results.json (the run's facts and the table) and the plots to `outDir`, prints the table. */
export function writeReport(o: { outDir: string; title: string; results: Record<string, unknown>; rows: Row[]; plots: Plot[] }): void {
  mkdirSync(o.outDir, { recursive: true });
  writeFileSync(join(o.outDir, 'results.json'), `${JSON.stringify({ ...o.results, table: o.rows }, null, 2)}\n`);
  for (const p of o.plots) writeFileSync(join(o.outDir, p.file), lineChart(p.chart));
  const lines = ['', o.title, '', ...markdownTable(o.rows), '', `JSON and plots: ${o.outDir}`];
  process.stdout.write(`${lines.join('\n')}\n`);
}
