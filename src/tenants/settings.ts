import * as settings from '../shared/settings.js';

// The settings of `outbox-relay run` with a tenant rule (docs/tenants.md). Each is also an
// option of createTenantRelay, checked by the same `check`.

const pattern = (value: string): string | undefined => (value.length > 200 ? 'is longer than 200 characters' : undefined);

export const tenantSchemas = settings.checkedText({
  option: 'tenantSchemas',
  flag: '--tenant-schemas',
  env: 'OUTBOX_TENANT_SCHEMAS',
  description: 'Serve as tenants every schema of the database (DATABASE_URL) whose name matches this POSIX regular expression and that holds a migrated outbox. See docs/tenants.md.',
  defaultValue: '',
  check: pattern,
});

export const tenantDatabases = settings.checkedText({
  option: 'tenantDatabases',
  flag: '--tenant-databases',
  env: 'OUTBOX_TENANT_DATABASES',
  description: "Serve as tenants every database of DATABASE_URL's server whose name matches this POSIX regular expression, with a migrated outbox in --schema.",
  defaultValue: '',
  check: pattern,
});

export const tenantQueryFile = settings.text({
  option: 'tenantQueryFile',
  flag: '--tenant-query-file',
  env: 'OUTBOX_TENANT_QUERY_FILE',
  description: 'Serve as tenants the rows of the SQL query in this file (columns tenant, schema, database), run in the database of DATABASE_URL.',
});

export const topicTemplate = settings.checkedText({
  option: 'topicTemplate',
  flag: '--topic-template',
  env: 'OUTBOX_TOPIC_TEMPLATE',
  description: "With tenants: a row's Kafka topic, from {tenant} and its topic column {topic}.",
  defaultValue: '{tenant}.{topic}',
  check: (v) => (v.length === 0 || v.length > 300 ? 'is 1-300 characters' : undefined),
});

export const keyTemplate = settings.checkedText({
  option: 'keyTemplate',
  flag: '--key-template',
  env: 'OUTBOX_KEY_TEMPLATE',
  description: "With tenants: a row's Kafka key, from its key column {key} and {tenant} (e.g. {tenant}:{key} on a topic all tenants share).",
  defaultValue: '{key}',
  check: (v) => (v.length === 0 || v.length > 300 ? 'is 1-300 characters' : undefined),
});

export const tenantHeader = settings.checkedText({
  option: 'tenantHeader',
  flag: '--tenant-header',
  env: 'OUTBOX_TENANT_HEADER',
  description: "With tenants: the header carrying the tenant's name on every message; none for no header.",
  defaultValue: 'outbox-tenant',
  normalize: (v) => (v === 'none' ? '' : v),
  check: (v) => (v === '' || /^[A-Za-z0-9._-]{1,100}$/.test(v) ? undefined : `${JSON.stringify(v)} is not a header name (1-100 of A-Z a-z 0-9 . _ -), nor none`),
});

export const discoveryIntervalMs = settings.integer({
  option: 'discoveryIntervalMs',
  flag: '--discovery-interval-ms',
  env: 'OUTBOX_DISCOVERY_INTERVAL_MS',
  description: 'With tenants: how often the rule is evaluated again (tenants added or removed are served or released).',
  defaultValue: 30_000,
  min: 100,
  max: 86_400_000,
});

export const sweepIntervalMs = settings.integer({
  option: 'sweepIntervalMs',
  flag: '--sweep-interval-ms',
  env: 'OUTBOX_SWEEP_INTERVAL_MS',
  description: "With tenants: how often every idle tenant's outbox is asked for waiting rows, whatever the notifications said.",
  defaultValue: 60_000,
  min: 100,
  max: 86_400_000,
});

export const activityIntervalMs = settings.integer({
  option: 'activityIntervalMs',
  flag: '--activity-interval-ms',
  env: 'OUTBOX_ACTIVITY_INTERVAL_MS',
  description: 'With tenants: how often the statistics of the tenants without an insert trigger, and of other databases, are read.',
  defaultValue: 500,
  min: 50,
  max: 3_600_000,
});

export const tenantIdleMs = settings.integer({
  option: 'tenantIdleMs',
  flag: '--tenant-idle-ms',
  env: 'OUTBOX_TENANT_IDLE_MS',
  description: 'With tenants: a tenant that published nothing for this long is released (its connections closed).',
  defaultValue: 2_000,
  min: 100,
  max: 3_600_000,
});

export const tenantTurnMs = settings.integer({
  option: 'tenantTurnMs',
  flag: '--tenant-turn-ms',
  env: 'OUTBOX_TENANT_TURN_MS',
  description: 'With tenants: while others wait for room in the budget, a tenant is served this long before it gives its place up.',
  defaultValue: 1_000,
  min: 100,
  max: 3_600_000,
});

/** The settings of the tenant relay itself (the rule comes from one of the first three). */
export const TENANT_SETTINGS = [
  tenantSchemas,
  tenantDatabases,
  tenantQueryFile,
  topicTemplate,
  keyTemplate,
  tenantHeader,
  discoveryIntervalMs,
  sweepIntervalMs,
  activityIntervalMs,
  tenantIdleMs,
  tenantTurnMs,
] as const;
