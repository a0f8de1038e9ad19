import { createRequire } from 'node:module';
import { ConfigError } from '../shared/errors.js';
import type avroModule from 'avsc';
import type protobufModule from 'protobufjs';
import type * as ajvModule from 'ajv';
import type * as ajv2019Module from 'ajv/dist/2019.js';
import type * as ajv2020Module from 'ajv/dist/2020.js';
import type { FormatsPlugin } from 'ajv-formats';
import type { SchemaRegistryAPIClient, SchemaRegistryAPIClientArgs } from '@kafkajs/confluent-schema-registry/dist/api/index.js';

// The format and registry libraries: optional peer dependencies, installed by those who
// configure encodings (docs/encodings.md#install), and loaded at their first use. Loading
// them takes about 0.2 CPU-seconds, which every CLI command and every import of the package
// would pay, while only a relay or consumer with encodings uses them; and protobufjs has
// an install script, which npm would announce to every app installing outbox-relay. All
// five are CommonJS, so a synchronous require serves the synchronous option checks too.
const nodeRequire = createRequire(import.meta.url);

/** The packages encodings need, as one `npm install` names them. */
export const ENCODING_PACKAGES = ['@kafkajs/confluent-schema-registry@^4.1.0', 'avsc@^5.7.0', 'protobufjs@^8.0.0', 'ajv@^8.17.0', 'ajv-formats@^3.0.1'] as const;

/**
 * `require(name)`, or a ConfigError naming the packages to install when `name` is not
 * installed (`load` stands in for Node's require in a test).
 */
export function requireOptional(name: string, load: (name: string) => unknown = nodeRequire): unknown {
  try {
    return load(name);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code !== 'MODULE_NOT_FOUND' || !String((error as Error).message).includes(name.split('/').slice(0, name.startsWith('@') ? 2 : 1).join('/'))) throw error;
    throw new ConfigError('encodings', `need the optional packages ${ENCODING_PACKAGES.join(', ')}, and ${name} is not installed: npm install ${ENCODING_PACKAGES.join(' ')}`);
  }
}
const require = (name: string): unknown => requireOptional(name);

let avro: typeof avroModule | undefined;
let protobuf: typeof protobufModule | undefined;
let ajv: { Ajv: typeof ajvModule.Ajv; Ajv2019: typeof ajv2019Module.Ajv2019; Ajv2020: typeof ajv2020Module.Ajv2020 } | undefined;
let formats: FormatsPlugin | undefined;
let registryApi: ((args: SchemaRegistryAPIClientArgs) => SchemaRegistryAPIClient) | undefined;

/** avsc. */
export function avsc(): typeof avroModule {
  return (avro ??= require('avsc') as typeof avroModule);
}

/** protobufjs. */
export function protobufjs(): typeof protobufModule {
  return (protobuf ??= require('protobufjs') as typeof protobufModule);
}

/** ajv's classes for draft-07 (and -06), 2019-09 and 2020-12. */
export function ajvClasses(): NonNullable<typeof ajv> {
  return (ajv ??= {
    Ajv: (require('ajv') as typeof ajvModule).Ajv,
    Ajv2019: (require('ajv/dist/2019.js') as typeof ajv2019Module).Ajv2019,
    Ajv2020: (require('ajv/dist/2020.js') as typeof ajv2020Module).Ajv2020,
  });
}

/** ajv-formats' plugin: the `format` keyword's definitions (date-time, email, uri, …). */
export function ajvFormats(): FormatsPlugin {
  return (formats ??= (require('ajv-formats') as { default: FormatsPlugin }).default);
}

/** The REST client factory of @kafkajs/confluent-schema-registry. */
export function schemaRegistryApi(): (args: SchemaRegistryAPIClientArgs) => SchemaRegistryAPIClient {
  return (registryApi ??= (require('@kafkajs/confluent-schema-registry/dist/api/index.js') as { default: (args: SchemaRegistryAPIClientArgs) => SchemaRegistryAPIClient }).default);
}

/** A JSON file of a package (ajv's meta-schemas). */
export function packageJson(path: string): unknown {
  return require(path);
}
