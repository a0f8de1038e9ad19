import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import kafkajs, { Kafka, logLevel } from 'kafkajs';
import { startLocalKafka, type LocalKafka } from '../scripts/localKafka.js';
import { createRelay } from '../src/relay/relay.js';
import { createTestSchema, uniqueName, type TestSchema } from './helpers/db.js';
import { sentCount, writeCommitted } from './helpers/outbox.js';
import { waitFor } from './helpers/wait.js';
import { TEST_PRODUCER } from './helpers/producer.js';

// Exactly-once delivery's start-up checks against a broker that enforces ACLs (KRaft's
// StandardAuthorizer; the relay connects as a SCRAM user, the test administers over the
// PLAINTEXT listener, whose anonymous user is a super user): each missing permission
// refuses the start with a line naming it, and with all of them granted the relay
// publishes (docs/exactly-once.md, "What it needs of Kafka").

// Not named exports Node's ESM loader finds in kafkajs' CommonJS.
const { AclResourceTypes, AclOperationTypes, AclPermissionTypes, ResourcePatternTypes } = kafkajs;

const USER = 'eos-relay';
const PASSWORD = 'eos-pass-51c2';

let broker: LocalKafka;
let db: TestSchema;
before(async () => {
  broker = await startLocalKafka({
    scram: { username: USER, password: PASSWORD },
    properties: {
      'authorizer.class.name': 'org.apache.kafka.metadata.authorizer.StandardAuthorizer',
      'super.users': 'User:ANONYMOUS',
      'allow.everyone.if.no.acl.found': 'false',
    },
  });
  db = await createTestSchema('eosacl');
});
after(async () => {
  await db?.drop();
  await broker?.destroy();
});

/** Grant the relay's user `operation` on a resource (a prefix when `prefixed`). */
async function grant(resourceType: number, resourceName: string, operation: number, prefixed = false): Promise<void> {
  const admin = new Kafka({ clientId: uniqueName('acl-admin'), brokers: [broker.brokers], logLevel: logLevel.NOTHING }).admin();
  await admin.connect();
  try {
    await admin.createAcls({
      acl: [
        {
          resourceType,
          resourceName,
          resourcePatternType: prefixed ? ResourcePatternTypes.PREFIXED : ResourcePatternTypes.LITERAL,
          principal: `User:${USER}`,
          host: '*',
          operation,
          permissionType: AclPermissionTypes.ALLOW,
        },
      ],
    });
  } finally {
    await admin.disconnect();
  }
}

test('integration: exactly-once on a broker with ACLs: no TransactionalId permission, then no progress group permission, each refuse the start naming it; with both the relay publishes', async () => {
  const prefix = uniqueName('eos-acl');
  // What the default mode needs (topics, the cluster's metadata and settings) and no more.
  await grant(AclResourceTypes.TOPIC, '*', AclOperationTypes.ALL);
  await grant(AclResourceTypes.CLUSTER, 'kafka-cluster', AclOperationTypes.DESCRIBE_CONFIGS);
  await grant(AclResourceTypes.CLUSTER, 'kafka-cluster', AclOperationTypes.CREATE);
  const topic = uniqueName('acl-topic');
  await writeCommitted(db, [{ topic, key: 'k', payload: { n: 1 } }]);
  const relay = () =>
    createRelay({
      producer: TEST_PRODUCER,
      delivery: 'exactly-once',
      transactionalIdPrefix: prefix,
      databaseUrl: db.databaseUrl,
      kafkaBrokers: [broker.saslBrokers as string],
      kafkaSaslMechanism: 'scram-sha-256',
      kafkaSaslUsername: USER,
      kafkaSaslPassword: PASSWORD,
      schema: db.schema,
    });

  await assert.rejects(relay().start(), /exactly-once delivery cannot start: Kafka refused the transactional id "[^"]+": allow WRITE and DESCRIBE on TransactionalId with this prefix/);

  await grant(AclResourceTypes.TRANSACTIONAL_ID, prefix, AclOperationTypes.ALL, true);
  await assert.rejects(relay().start(), /exactly-once delivery cannot start: cannot read the progress group "[^"]+" .*allow READ and DESCRIBE on the group/);

  await grant(AclResourceTypes.GROUP, prefix, AclOperationTypes.ALL, true);
  const r = relay();
  await r.start();
  try {
    await waitFor('the row sent', async () => (await sentCount(db, topic)) === 1);
  } finally {
    await r.stop();
  }
});
