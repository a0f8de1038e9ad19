import { test } from 'node:test';
import assert from 'node:assert/strict';
import { downstreamKey, effectKey } from '../../src/effects/key.js';
import { EffectKeyError } from '../../src/effects/errors.js';

test('effectKey: type + entity parts + version, in the design\'s pattern', () => {
  assert.equal(effectKey({ type: 'notif', entity: ['u-42', 'welcome'], version: 7 }), 'notif:u-42:welcome:7');
  assert.equal(effectKey({ type: 'charge', entity: 'order-9', version: 12345678901234567890n }), 'charge:order-9:12345678901234567890');
  assert.equal(effectKey({ type: 'notif', entity: 0, version: '3f2a' }), 'notif:0:3f2a');
  // The same parts, the same key: on every attempt, in every process.
  assert.equal(effectKey({ type: 'notif', entity: ['u-42', 'welcome'], version: 7 }), effectKey({ type: 'notif', entity: ['u-42', 'welcome'], version: 7 }));
});

test('effectKey: separators inside a part are escaped, so different parts never give the same key, and the key is plain ASCII', () => {
  const a = effectKey({ type: 'notif', entity: ['a:b', 'c'], version: 1 });
  const b = effectKey({ type: 'notif', entity: ['a', 'b:c'], version: 1 });
  assert.equal(a, 'notif:a%3Ab:c:1');
  assert.equal(b, 'notif:a:b%3Ac:1');
  assert.notEqual(a, b);
  assert.notEqual(effectKey({ type: 'x', entity: '%3A', version: 1 }), effectKey({ type: 'x', entity: ':', version: 1 }), 'an escape sequence in a part is escaped too');
  const unicode = effectKey({ type: 'notif', entity: 'zoë 😀', version: 1 });
  assert.match(unicode, /^[\x21-\x7e]+$/);
  assert.equal(decodeURIComponent(unicode.split(':')[1]!), 'zoë 😀');
});

test('effectKey: refuses parts that cannot make a stable key, naming the part', () => {
  const refused = (parts: unknown, part: string, why: RegExp): void => {
    assert.throws(
      () => effectKey(parts as never),
      (e) => e instanceof EffectKeyError && !e.retriable && e.context.part === part && why.test(e.message),
      `${JSON.stringify(parts, (_, v) => (typeof v === 'bigint' ? String(v) : v))} refused for ${part}`,
    );
  };
  refused({ type: 'notif', entity: 'u1', version: undefined }, 'version', /is undefined/);
  refused({ type: 'notif', entity: 'u1', version: null }, 'version', /is null/);
  refused({ type: 'notif', entity: 'u1', version: Number.NaN }, 'version', /NaN.*safe integer/);
  refused({ type: 'notif', entity: 'u1', version: Infinity }, 'version', /Infinity/);
  refused({ type: 'notif', entity: 'u1', version: 1.5 }, 'version', /1\.5/);
  refused({ type: 'notif', entity: 'u1', version: new Date() }, 'version', /a Date \(a time is not a stable key/);
  refused({ type: 'notif', entity: '', version: 1 }, 'entity', /is empty/);
  refused({ type: 'notif', entity: '  ', version: 1 }, 'entity', /is blank/);
  refused({ type: 'notif', entity: ['u1', undefined], version: 1 }, 'entity[1]', /is undefined/);
  refused({ type: 'notif', entity: [], version: 1 }, 'entity', /empty list/);
  refused({ type: '', entity: 'u1', version: 1 }, 'type', /is empty/);
  refused({ type: 'notif', entity: { id: 1 }, version: 1 }, 'entity', /an object/);
  refused({ type: 'notif', entity: 'u1', version: true }, 'version', /a boolean/);
  refused({ type: 'notif', entity: 'x'.repeat(201), version: 1 }, 'entity', /longer than 200/);
  refused(undefined, 'parts', /must be an object/);
});

test('effectKey.fromRequest: an upstream request id, with a type when one request causes several effects', () => {
  assert.equal(effectKey.fromRequest('9b1d-77'), 'req:9b1d-77');
  assert.equal(effectKey.fromRequest('9b1d-77', 'email'), 'email:req:9b1d-77');
  assert.equal(effectKey.fromRequest('a:b'), 'req:a%3Ab');
  for (const bad of [undefined, null, '', ' ', 42]) {
    assert.throws(() => effectKey.fromRequest(bad as never), (e) => e instanceof EffectKeyError && e.context.part === 'requestId', String(bad));
  }
  assert.throws(() => effectKey.fromRequest('r1', ''), (e) => e instanceof EffectKeyError && e.context.part === 'type');
});

test('downstreamKey: the key itself when it fits a header (1-255 visible ASCII), else a stable sha256 digest', () => {
  assert.equal(downstreamKey('notif:u-42:welcome:7'), 'notif:u-42:welcome:7');
  const long = `notif:${'x'.repeat(300)}:1`;
  const digest = downstreamKey(long);
  assert.match(digest, /^sha256:[A-Za-z0-9_-]{43}$/);
  assert.equal(downstreamKey(long), digest, 'stable');
  assert.notEqual(downstreamKey(`${long}2`), digest);
  assert.match(downstreamKey('with space'), /^sha256:/);
  assert.match(downstreamKey('zoë'), /^sha256:/);
});
