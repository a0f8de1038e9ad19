import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { hostileCases, makeWorld } from './cases.js';
import type { CaseClass, HostileCase, World } from './caseTypes.js';
import { closeAdmin, pooled } from './support.js';

/**
 * The hostile-input suite is split in two files by class: the classes whose cases start a
 * relay (test/hostile.relay.integration.test.ts), which CI's second pass runs again on the
 * other producer adapter, and the rest (test/hostile.integration.test.ts), which start
 * none. Every class is in exactly one of them, with its pinned number of cases.
 */
export const CASES_BY_FILE = {
  relay: { 'odd rows': 17, http: 4, signals: 3 },
  other: { config: 56, 'schema state': 6, operator: 18, 'consumer library': 15, secrets: 8 },
} as const satisfies Record<string, Partial<Record<CaseClass, number>>>;

const CASE_TIMEOUT_MS = 120_000;

/**
 * Register the suite's tests for `part`'s classes: the cases run a few at a time in
 * before(), each is then reported as its own test, and the last test checks that as many
 * cases ran as the list holds for these classes. HOSTILE_ONLY=<regex> runs the matching
 * cases only (to look at one); the count check then compares with the filtered list.
 */
export function hostileSuite(part: keyof typeof CASES_BY_FILE, extraChecks: (cases: HostileCase[]) => void = () => undefined): void {
  const classes: Partial<Record<CaseClass, number>> = CASES_BY_FILE[part];
  const only = process.env.HOSTILE_ONLY ? new RegExp(process.env.HOSTILE_ONLY) : undefined;
  const all = hostileCases();
  const cases = all.filter((c) => c.class in classes && (!only || only.test(`${c.class}: ${c.name}`)));
  let world: World;
  let results: Array<PromiseSettledResult<void>> = [];
  let ran = 0;

  before(async () => {
    world = await makeWorld();
    const started = Date.now();
    results = await pooled(
      4,
      cases.map((c) => async () => {
        ran++;
        // A case that hangs fails alone, with its name, instead of timing the file out.
        let timer: NodeJS.Timeout | undefined;
        const limit = new Promise<never>((_, reject) => {
          timer = setTimeout(() => reject(new Error(`case did not finish within ${CASE_TIMEOUT_MS} ms`)), CASE_TIMEOUT_MS);
        });
        try {
          await Promise.race([c.run(world), limit]);
        } finally {
          clearTimeout(timer);
        }
      }),
    );
    process.stdout.write(`# hostile inputs (${part}): ${cases.length} cases run in ${((Date.now() - started) / 1000).toFixed(1)} s\n`);
  });

  after(async () => {
    await world?.base.drop();
    await closeAdmin();
  });

  cases.forEach((c, i) => {
    test(`integration: hostile ${c.class}: ${c.name}${c.knownBug ? ` [known bug: ${c.knownBug}]` : ''}`, () => {
      const r = results[i];
      assert.ok(r, 'the case ran');
      if (r.status === 'rejected') throw r.reason;
    });
  });

  test(`integration: hostile inputs (${part}): every case of its classes ran, and every class of the list is in one of the two files`, () => {
    const byClass = new Map<string, number>();
    for (const c of cases) byClass.set(c.class, (byClass.get(c.class) ?? 0) + 1);
    process.stdout.write(`hostile inputs (${part}): ${cases.length} cases (${[...byClass].map(([k, n]) => `${k} ${n}`).join(', ')})\n`);
    assert.equal(ran, cases.length);
    assert.equal(results.filter(Boolean).length, cases.length);
    const listed = new Set(all.map((c) => c.class));
    const split = [...Object.keys(CASES_BY_FILE.relay), ...Object.keys(CASES_BY_FILE.other)];
    assert.deepEqual([...listed].sort(), [...split].sort(), 'each class of the list in exactly one file');
    assert.equal(new Set(split).size, split.length, 'no class in both files');
    if (only) return;
    // Pinned, class by class: a case lost from the list (a generator that skips a setting,
    // a filter left in) fails here. Adding a case means raising its class's count.
    assert.deepEqual(Object.fromEntries(byClass), classes);
    extraChecks(cases);
  });
}
