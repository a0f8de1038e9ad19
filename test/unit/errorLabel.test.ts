import { test } from 'node:test';
import assert from 'node:assert/strict';
import { errorLabel } from '../../src/metrics/errorLabel.js';
import { DeadlineError, withDeadline } from '../../src/metrics/promises.js';

const withFields = (name: string, fields: Record<string, unknown>): Error => Object.assign(Object.assign(new Error('message never used'), { name }), fields);

test('error labels: @platformatic/kafka errors are labelled like kafkajs ones, by the Kafka error they carry', () => {
  const protocol = withFields('ProtocolError', { code: 'PLT_KFK_PROTOCOL', apiId: 'NOT_LEADER_OR_FOLLOWER' });
  assert.equal(errorLabel(protocol), 'kafka_not_leader_or_follower');
  assert.equal(errorLabel(withFields('MultipleErrors', { code: 'PLT_KFK_MULTIPLE', errors: [protocol] })), 'kafka_not_leader_or_follower');
  assert.equal(errorLabel(withFields('NetworkError', { code: 'PLT_KFK_NETWORK' })), 'kafka_connection_error');
  assert.equal(errorLabel(withFields('TimeoutError', { code: 'PLT_KFK_TIMEOUT' })), 'kafka_timeout');
  // A protocol error whose apiId is not a Kafka error name is not copied into a label.
  assert.equal(errorLabel(withFields('ProtocolError', { code: 'PLT_KFK_PROTOCOL', apiId: 'drop table; --' })), 'kafka_protocol');
});

test('error labels: kafkajs, Postgres and socket errors keep their labels', () => {
  assert.equal(errorLabel(withFields('KafkaJSProtocolError', { type: 'MESSAGE_TOO_LARGE' })), 'kafka_message_too_large');
  assert.equal(errorLabel(withFields('error', { code: '57P01' })), 'postgres_57p01');
  assert.equal(errorLabel(withFields('Error', { code: 'ECONNREFUSED' })), 'network_econnrefused');
  assert.equal(errorLabel('not an error'), 'other');
});

test('error labels: a probe that gave up waiting says so (deadline_error), not other', async () => {
  const never = new Promise<never>(() => undefined);
  const error = await withDeadline(never, 5, 'Kafka metadata request').catch((e: unknown) => e);
  assert.ok(error instanceof DeadlineError);
  assert.equal((error as DeadlineError).message, 'Kafka metadata request timed out after 5 ms');
  assert.equal((error as DeadlineError).retriable, true);
  assert.equal(errorLabel(error), 'deadline_error');
});
