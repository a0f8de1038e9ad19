import { test } from 'node:test';
import assert from 'node:assert/strict';
import { tenantMessage, tenantNameProblem, tenantNamingProblem, tenantProducer, type TenantNaming } from '../../src/tenants/naming.js';
import type { MessageProducer, SendResult } from '../../src/relay/messageProducer.js';
import type { RelayMessage } from '../../src/relay/message.js';

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
