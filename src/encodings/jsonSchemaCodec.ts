import type { AnySchemaObject, ErrorObject, ValidateFunction } from 'ajv';
import { ajvClasses, ajvFormats, packageJson } from './libraries.js';
import type { SchemaCodec } from './codec.js';
import { describeValue, fieldName, joinPath } from './describe.js';

/**
 * A JSON Schema's codec (ajv). The body is the row's JSON re-serialized compactly; the
 * schema only checks it. The dialect follows `$schema` (draft-07 when absent; draft-06,
 * 2019-09 and 2020-12 too; draft-04 is refused, ajv 8 does not have it). `format` is
 * checked for the formats ajv-formats defines (date-time, email, uri, …), in agreement
 * with the everit validator on the values test/registryInfra.integration.test.ts tries; a
 * format it does not know is ignored.
 *
 * @throws Error when the text is not JSON or not a schema ajv compiles
 */
export function jsonSchemaCodec(text: string): SchemaCodec {
  const schema = JSON.parse(text) as unknown;
  if (typeof schema !== 'object' || schema === null || Array.isArray(schema)) {
    throw new Error(typeof schema === 'boolean' ? 'a boolean schema names no type' : 'a JSON Schema is a JSON object');
  }
  const object = schema as AnySchemaObject;
  const validate = compile(object);
  return {
    format: 'json-schema',
    text,
    recordName: typeof object.title === 'string' && object.title !== '' ? object.title : undefined,
    topIsString: object.type === 'string',
    messageIndexes: undefined,
    encode(value) {
      if (!validate(value)) return { problem: describeError(validate.errors?.[0], value) };
      return { body: Buffer.from(JSON.stringify(value), 'utf8') };
    },
    decode(body) {
      return JSON.parse(body.toString('utf8')) as unknown;
    },
  };
}

function compile(schema: AnySchemaObject): ValidateFunction {
  const dialect = typeof schema.$schema === 'string' ? schema.$schema : '';
  // One instance per schema: two schemas with the same $id must not meet.
  const options = { strict: false, allErrors: false, logger: false as const };
  if (dialect.includes('draft-04')) throw new Error('JSON Schema draft-04 is not supported (ajv 8): use draft-07 or later');
  const { Ajv, Ajv2019, Ajv2020 } = ajvClasses();
  const ajv = dialect.includes('2020-12') ? new Ajv2020(options) : dialect.includes('2019-09') ? new Ajv2019(options) : new Ajv(options);
  ajvFormats()(ajv);
  if (dialect.includes('draft-06')) ajv.addMetaSchema(packageJson('ajv/dist/refs/json-schema-draft-06.json') as AnySchemaObject);
  return ajv.compile(schema);
}

/** `field items[0].sku: must be string (type), got number 1`. */
function describeError(error: ErrorObject | undefined, value: unknown): string {
  if (!error) return 'the value does not fit the schema';
  const path = error.instancePath === '' ? [] : error.instancePath.slice(1).split('/').map(unescapePointer);
  const params = error.params as Record<string, unknown>;
  if (error.keyword === 'required' && typeof params.missingProperty === 'string') {
    return `${fieldName(joinPath([...path, params.missingProperty]))}: is required (required), got ${describeValue(undefined)}`;
  }
  if (error.keyword === 'additionalProperties' && typeof params.additionalProperty === 'string') {
    return `${fieldName(joinPath([...path, params.additionalProperty]))}: is not allowed (additionalProperties)`;
  }
  return `${fieldName(joinPath(path))}: ${error.message ?? 'does not fit'} (${error.keyword}), got ${describeValue(valueAt(value, path))}`;
}

function unescapePointer(part: string): string {
  return part.replace(/~1/g, '/').replace(/~0/g, '~');
}

function valueAt(value: unknown, path: readonly string[]): unknown {
  let at = value;
  for (const part of path) {
    if (typeof at !== 'object' || at === null) return undefined;
    at = (at as Record<string, unknown>)[part];
  }
  return at;
}
