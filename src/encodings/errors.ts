import { OutboxError } from '../shared/errors.js';

/**
 * A row does not fit its schema (or is not JSON, or names a schema id that cannot encode
 * it). Never retriable: the same row fails the same way every time, so the relay moves
 * that row alone to the dead letters.
 *
 * `errorName` is what the dead letter records as its error name (`encoding:avro`,
 * `encoding:protobuf`, `encoding:json-schema`); the message names the field path, the
 * rule broken, the subject and the schema id, and never the row's whole payload.
 */
export class RowEncodingError extends OutboxError {
  /** The dead letter's error name, e.g. `encoding:avro`. */
  readonly errorName: string;

  constructor(errorName: string, message: string, context?: Record<string, unknown>, cause?: unknown) {
    super(message, { retriable: false, context: { errorName, ...context }, cause });
    this.errorName = errorName;
  }
}

/**
 * The schema registry did not answer usefully (connection refused or reset, timeout, 5xx,
 * 429). Retriable: rows wait for it and nothing is dead-lettered.
 */
export class RegistryUnavailableError extends OutboxError {
  constructor(message: string, context?: Record<string, unknown>, cause?: unknown) {
    super(message, { retriable: true, context, cause });
  }
}

/**
 * The registry refused a schema as incompatible with the subject's earlier versions
 * (HTTP 409). Not retriable: the schema or the subject's compatibility must change.
 */
export class IncompatibleSchemaError extends OutboxError {
  readonly subject: string;

  constructor(subject: string, message: string, cause?: unknown) {
    super(message, { retriable: false, context: { subject }, cause });
    this.subject = subject;
  }
}

/**
 * The registry does not know a schema id (HTTP 404, error code 40403). Not retriable by
 * itself; a consumer may try a few times (a registry replica behind its peers) before it
 * gives the message up.
 */
export class UnknownSchemaError extends OutboxError {
  readonly schemaId: number;

  constructor(schemaId: number, message?: string, cause?: unknown) {
    super(message ?? `the schema registry knows no schema with id ${schemaId}`, {
      retriable: false,
      context: { schemaId },
      cause,
    });
    this.schemaId = schemaId;
  }
}

/**
 * The registry answered with something no retry fixes: credentials refused (401/403), a
 * schema refused as invalid (422), a request it does not understand (4xx). Not
 * retriable. `status` is the HTTP status; the message never quotes a credential.
 */
export class RegistryRequestError extends OutboxError {
  readonly status: number;

  constructor(status: number, message: string, context?: Record<string, unknown>, cause?: unknown) {
    super(message, { retriable: false, context: { status, ...context }, cause });
    this.status = status;
  }
}
