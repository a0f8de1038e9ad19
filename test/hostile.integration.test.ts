// The hostile-input suite, the classes whose cases start no relay: config, schema state,
// operator commands, the consumer library, secrets (test/hostile/cases.ts), on the real
// Postgres and broker. The classes that start a relay are in hostile.relay.integration.test.ts;
// test/hostile/suite.ts runs both and checks that each class is in one of them.
import assert from 'node:assert/strict';
import { FREE_TEXT_SETTINGS } from './hostile/cases.js';
import { hostileSuite } from './hostile/suite.js';
import { RUN_SETTINGS } from '../src/commands/run.js';

hostileSuite('other', (cases) => {
  // Each free-text setting (no probe value) has a case of its own naming it.
  for (const s of RUN_SETTINGS.filter((x) => FREE_TEXT_SETTINGS.has(x.option))) {
    assert.ok(cases.some((c) => c.name.includes(s.env) || (s.flag !== undefined && c.name.includes(s.flag))), `no case names ${s.env}`);
  }
});
