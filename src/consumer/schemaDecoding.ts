import type { KafkaMessage } from 'kafkajs';
import { createRegistryDecoder, UnknownSchemaError, type RegistryDecoder, type SchemaRegistryOptions } from '../encodings/index.js';

/**
 * The consumer's side of schema-registry encodings (docs/encodings.md): values in
 * Confluent's wire format are decoded by their schema id, fetched once from the registry.
 * Fetching is asynchronous and decoding is not (prepare.ts decodes a chunk in one pass),
 * so a chunk's schemas are fetched before it is prepared.
 */
export class SchemaDecoding {
  private readonly decoder: RegistryDecoder;

  constructor(registry: SchemaRegistryOptions) {
    this.decoder = createRegistryDecoder(registry);
  }

  /**
   * Fetch the schemas of a chunk's framed values.
   * @returns the registry's failure when it did not answer (the chunk waits, nothing is
   *   dead-lettered), else undefined. An id the registry does not know is not a failure
   *   here: its message fails to decode, is retried, then dead-lettered (consumer.ts).
   */
  async prefetch(chunk: readonly KafkaMessage[]): Promise<unknown> {
    try {
      await this.decoder.prefetch(chunk.map((m) => m.value));
      return undefined;
    } catch (error) {
      return error instanceof UnknownSchemaError ? undefined : error;
    }
  }

  /** A framed value decoded, with its schema id; undefined for a value not in the wire format. */
  decode(value: Buffer): { value: unknown; schemaId: number } | undefined {
    return this.decoder.decode(value);
  }

  close(): Promise<void> {
    return this.decoder.close();
  }
}

/** Whether a message's failure to prepare is a schema id the registry does not know (yet): retried, unlike other undecodable values. */
export function unknownSchema(error: unknown): boolean {
  return error instanceof UnknownSchemaError || (error instanceof Error && error.cause instanceof UnknownSchemaError);
}
