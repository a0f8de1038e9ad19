/**
 * A schema ready to encode and decode bodies: what every format's codec (./avroCodec.ts,
 * ./protobufCodec.ts, ./jsonSchemaCodec.ts) offers the encoder and the decoder.
 */

/** The formats that go through a schema registry. */
export type RegistryFormat = 'avro' | 'protobuf' | 'json-schema';

export interface SchemaCodec {
  readonly format: RegistryFormat;
  /** The schema text as the registry holds it (or as the file has it). */
  readonly text: string;
  /**
   * The record name the RecordName strategies use: the Avro record's full name, the
   * Protobuf message's full name (`package.Message`), the JSON Schema's `title`; undefined
   * when the schema has none (an Avro "string", a JSON Schema without title).
   */
  readonly recordName: string | undefined;
  /** Whether the top type is a string (a key's text is then encoded as it is, not as JSON). */
  readonly topIsString: boolean;
  /** Protobuf: the path of the encoded message in its file (Confluent's message indexes). */
  readonly messageIndexes: number[] | undefined;
  /**
   * The body of a value (parsed JSON), or why the value does not fit: the field's path,
   * what the schema expects there and what the value has (no subject or id: the caller
   * knows those).
   */
  encode(value: unknown): { body: Buffer } | { problem: string };
  /**
   * A body back to a plain value. Protobuf: `messageIndexes` names the message type
   * (default this codec's). Throws Error when the body does not decode.
   */
  decode(body: Buffer, messageIndexes?: number[]): unknown;
}

/** The registry's `schemaType` of each format (Avro is the registry's default: no field). */
export const REGISTRY_SCHEMA_TYPES: Readonly<Record<RegistryFormat, string>> = {
  avro: 'AVRO',
  protobuf: 'PROTOBUF',
  'json-schema': 'JSON',
};

/** The format of a registry's `schemaType` (absent: Avro), or undefined for one we do not know. */
export function formatOfSchemaType(schemaType: string | undefined): RegistryFormat | undefined {
  switch ((schemaType ?? 'AVRO').toUpperCase()) {
    case 'AVRO':
      return 'avro';
    case 'PROTOBUF':
      return 'protobuf';
    case 'JSON':
      return 'json-schema';
    default:
      return undefined;
  }
}

