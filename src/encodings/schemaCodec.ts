import { avroCodec } from './avroCodec.js';
import type { RegistryFormat, SchemaCodec } from './codec.js';
import { jsonSchemaCodec } from './jsonSchemaCodec.js';
import { protobufCodec } from './protobufCodec.js';

/**
 * The codec of a schema's text in a format.
 *
 * @param messageName Protobuf: the message to encode (default the file's first)
 * @throws Error saying why the text is not a schema of that format
 */
export function schemaCodec(format: RegistryFormat, text: string, messageName?: string): SchemaCodec {
  switch (format) {
    case 'avro':
      return avroCodec(text);
    case 'protobuf':
      return protobufCodec(text, messageName);
    case 'json-schema':
      return jsonSchemaCodec(text);
  }
}
