/** Placeholder: being written. */
import type pg from 'pg';
import type { SectionResult } from '../report.js';

export async function multiOutbox(_pool: pg.Pool, _o: { quick: boolean }): Promise<SectionResult<Record<string, never>>> {
  throw new Error('section multiOutbox is not written yet');
}
