import { test } from 'node:test';
import assert from 'node:assert/strict';
import { tenantMessage, tenantNameProblem, tenantNamingProblem, tenantProducer, type TenantNaming } from '../../src/tenants/naming.js';
import type { MessageProducer, SendResult } from '../../src/relay/messageProducer.js';
import type { RelayMessage } from '../../src/relay/message.js';
import { paceWanted } from '../../src/tenants/tenantRelay.js';

const perTenant: TenantNaming = { topicTemplate: '{tenant}.{topic}', keyTemplate: '{key}', tenantHeader: 'outbox-tenant' };
const shared: TenantNaming = { topicTemplate: '{topic}', keyTemplate: '{tenant}:{key}', tenantHeader: 'outbox-tenant' };
const message = (): RelayMessage => ({ id: 1, message_id: 'm', topic: 'orders', key: 'order-$1', value: '{}', headers: { 'outbox-tenant': 'spoofed', traceparent: 't' } });

test('a tenant message: topic and key from the templates, the tenant in its header over any the row set; the row’s own message untouched', () => {
  const m = message();
  assert.deepEqual(tenantMessage(perTenant, 'acme', m), { ...m, topic: 'acme.orders', key: 'order-$1', headers: { 'outbox-tenant': 'acme', traceparent: 't' } });
  assert.deepEqual(tenantMessage(shared, 'acme', m), { ...m, topic: 'orders', key: 'acme:order-$1', headers: { 'outbox-tenant': 'acme', traceparent: 't' } });
  assert.deepEqual(tenantMessage({ ...perTenant, tenantHeader: '' }, 'acme', m).headers, m.headers);
  assert.equal(m.topic, 'orders');
  assert.equal(m.headers['outbox-tenant'], 'spoofed');
});

test('a naming that cannot work is refused, naming the setting', () => {
  assert.equal(tenantNamingProblem(perTenant), undefined);
  assert.equal(tenantNamingProblem(shared), undefined);
  assert.match(tenantNamingProblem({ ...perTenant, topicTemplate: '{tenant}.{table}' })!.problem, /\{table\} is not a placeholder/);
  assert.match(tenantNamingProblem({ ...perTenant, topicTemplate: '{tenant}/{topic}' })!.problem, /not a legal Kafka topic name/);
  assert.equal(tenantNamingProblem({ ...perTenant, keyTemplate: 'x' })!.setting, 'keyTemplate');
  assert.equal(tenantNamingProblem({ ...perTenant, keyTemplate: '{key}{key}' })!.setting, 'keyTemplate');
  assert.match(tenantNamingProblem({ ...shared, keyTemplate: '{key}' })!.problem, /the key must carry the tenant/);
  assert.equal(tenantNamingProblem({ ...perTenant, tenantHeader: 'a b' })!.setting, 'tenantHeader');
});

test('a tenant whose name makes no topic name is refused', () => {
  assert.equal(tenantNameProblem(perTenant, 'tenant_42'), undefined);
  assert.match(tenantNameProblem(perTenant, 'a b')!, /is not 1-100 of/);
  const thrice = { ...perTenant, topicTemplate: '{tenant}.{tenant}.{tenant}.{topic}' };
  assert.equal(tenantNameProblem(thrice, 'x'.repeat(80)), undefined);
  assert.match(tenantNameProblem(thrice, 'x'.repeat(100))!, /makes no topic name/);
});

test('the tenant producer names every message it passes on, answers in order, and leaves the shared producer connected', async () => {
  const sent: RelayMessage[][] = [];
  let disconnected = false;
  const inner: MessageProducer = {
    adapter: 'platformatic',
    send: async (ms) => (sent.push([...ms]), ms.map((): SendResult => ({ acknowledged: true }))),
    disconnect: async () => void (disconnected = true),
  };
  const p = tenantProducer(inner, perTenant, 'acme');
  const results = await p.send([message(), { ...message(), id: 2, topic: 'billing' }]);
  assert.equal(results.length, 2);
  assert.deepEqual(sent[0]!.map((m) => m.topic), ['acme.orders', 'acme.billing']);
  await p.disconnect();
  assert.equal(disconnected, false);
  assert.equal(p.adapter, 'platformatic');
});

test('the tenant producer awaits beforeSend before it passes a batch on (how the tenant relay paces a backlog)', async () => {
  const order: string[] = [];
  const inner: MessageProducer = { adapter: 'kafkajs', send: async (ms) => (order.push('send'), ms.map((): SendResult => ({ acknowledged: true }))), disconnect: async () => undefined };
  const p = tenantProducer(inner, perTenant, 'acme', async () => {
    await new Promise((r) => setImmediate(r));
    order.push('paced');
  });
  await p.send([message()]);
  assert.deepEqual(order, ['paced', 'send']);
});

test('pacing: a tenant served past its turn waits while another starts, waits for room or began its turn less than a turn ago; else it does not', () => {
  const turn = 1_000;
  const now = 10_000;
  const big = { state: 'serving' as const, servedSinceMs: now - 5_000 };
  assert.equal(paceWanted(big, [big], now, turn), false, 'alone');
  assert.equal(paceWanted(big, [big, { state: 'starting', servedSinceMs: 0 }], now, turn), true);
  assert.equal(paceWanted(big, [big, { state: 'waiting', servedSinceMs: 0 }], now, turn), true);
  assert.equal(paceWanted(big, [big, { state: 'serving', servedSinceMs: now - 300 }], now, turn), true, 'another one just started serving');
  assert.equal(paceWanted(big, [big, { state: 'serving', servedSinceMs: now - 3_000 }, { state: 'idle', servedSinceMs: 0 }], now, turn), false, 'the others are past their turn or idle');
  const fresh = { state: 'serving' as const, servedSinceMs: now - 500 };
  assert.equal(paceWanted(fresh, [fresh, { state: 'waiting', servedSinceMs: 0 }], now, turn), false, 'within its own turn');
});
