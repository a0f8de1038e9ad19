// Schema-registry encodings (docs/encodings.md): rows' JSON as Avro, Protobuf or JSON
// Schema in Confluent's wire format on the relay's side, and back on the consumer's.
export {
  resolveEncodingOptions,
  loadEncodingsFile,
  resolveSchemaRegistryOptions,
  REGISTRY_PASSWORD_ENV,
  REGISTRY_TOKEN_ENV,
  type EncodingFormat,
  type SubjectStrategy,
  type SchemaSource,
  type EncodingSpec,
  type EncodingRule,
  type EncodingOptions,
  type ResolvedEncodingOptions,
  type ResolvedEncodingRule,
  type ResolvedEncodingSpec,
  type ResolvedSchemaSource,
  type SchemaRegistryOptions,
  type ResolvedSchemaRegistryOptions,
} from './options.js';
export { createRowEncoder, type EncodedParts, type RowEncoder } from './rowEncoder.js';
export { createRegistryDecoder, type RegistryDecoder } from './registryDecoder.js';
export { RowEncodingError, RegistryUnavailableError, IncompatibleSchemaError, UnknownSchemaError, RegistryRequestError } from './errors.js';
export { frame, unframe, isFramed, schemaIdOf, MAGIC_BYTE } from './wireFormat.js';
export { subjectName, type MessagePart } from './subjects.js';
