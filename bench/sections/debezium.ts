/** Placeholder: being written. */
import type pg from 'pg';
import type { SectionResult } from '../report.js';

export async function debezium(_pool: pg.Pool, _o: { quick: boolean }): Promise<SectionResult<Record<string, never>>> {
  throw new Error('section debezium is not written yet');
}
