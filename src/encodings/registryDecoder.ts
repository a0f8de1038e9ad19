import { OutboxError } from '../shared/errors.js';
import { formatOfSchemaType, type SchemaCodec } from './codec.js';
import { schemaCodec } from './schemaCodec.js';
import { UnknownSchemaError } from './errors.js';
import { createRegistryClient } from './registryClient.js';
import { resolveSchemaRegistryOptions, type SchemaRegistryOptions } from './registryOptions.js';
import { schemaIdOf, unframe } from './wireFormat.js';

/** Values in Confluent's wire format decoded by their schema id (the consumer's side). */
export interface RegistryDecoder {
  /**
   * Fetch (and keep) the schemas of every Confluent-framed value among these. Every id is
   * asked for even when one fails; an id that failed is asked for again next time.
   *
   * @throws RegistryUnavailableError (retriable) when the registry did not answer for
   *   some id, else UnknownSchemaError naming an id it does not know
   */
  prefetch(values: ReadonlyArray<Buffer | null>): Promise<void>;
  /**
   * A framed value decoded, synchronously once its schema is fetched: Avro as plain
   * objects, Protobuf as plain objects (longs as numbers, enums as names, bytes as base64,
   * defaults filled), JSON Schema as parsed JSON. undefined when the value is not framed
   * (shorter than 5 bytes, or first byte not 0).
   *
   * @throws UnknownSchemaError when the last prefetch found its id unknown; Error when
   *   its schema was not fetched, cannot be used, or the body does not decode
   */
  decode(value: Buffer): { value: unknown; schemaId: number } | undefined;
  close(): Promise<void>;
}

export function createRegistryDecoder(options: SchemaRegistryOptions): RegistryDecoder {
  const client = createRegistryClient(resolveSchemaRegistryOptions(options));
  const codecs = new Map<number, SchemaCodec>();
  /** Why an id has no codec, from the last prefetch that asked for it. */
  const failures = new Map<number, Error>();

  const fetch = async (id: number): Promise<void> => {
    try {
      const schema = await client.schemaById(id);
      const format = formatOfSchemaType(schema.schemaType);
      if (!format) throw new Error(`schema ${id} is of type ${schema.schemaType}, which this consumer does not decode`);
      try {
        codecs.set(id, schemaCodec(format, schema.schema));
      } catch (error) {
        throw new Error(`schema ${id} (${format}) cannot be used: ${(error as Error).message}`, { cause: error });
      }
      failures.delete(id);
    } catch (error) {
      failures.set(id, error as Error);
      throw error;
    }
  };

  return {
    async prefetch(values) {
      const ids = new Set<number>();
      for (const value of values) {
        if (value === null) continue;
        const id = schemaIdOf(value);
        if (id !== undefined && !codecs.has(id)) ids.add(id);
      }
      if (ids.size === 0) return;
      const results = await Promise.allSettled([...ids].map(fetch));
      const errors = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected').map((r) => r.reason as unknown);
      // The registry failing (down: retriable; credentials refused: not) matters most, the
      // chunk cannot go on; an unknown id comes next; a schema this cannot use is that
      // message's problem alone, which decode() reports.
      const registry = errors.filter((e) => e instanceof OutboxError && !(e instanceof UnknownSchemaError)) as OutboxError[];
      const failed = registry.find((e) => e.retriable) ?? registry[0];
      if (failed) throw failed;
      const unknown = errors.find((e) => e instanceof UnknownSchemaError);
      if (unknown) throw unknown;
    },
    decode(value) {
      const id = schemaIdOf(value);
      if (id === undefined) return undefined;
      const codec = codecs.get(id);
      if (!codec) {
        const failure = failures.get(id);
        if (failure instanceof UnknownSchemaError) throw failure;
        throw new Error(failure ? `schema ${id}: ${failure.message}` : `schema ${id} was not fetched (prefetch the values first)`, failure ? { cause: failure } : undefined);
      }
      try {
        const { body, messageIndexes } = unframe(value, codec.format === 'protobuf');
        return { value: codec.decode(body, messageIndexes), schemaId: id };
      } catch (error) {
        throw new Error(`the ${codec.format} body does not decode with schema ${id}: ${(error as Error).message}`, { cause: error });
      }
    },
    close: () => client.close(),
  };
}
