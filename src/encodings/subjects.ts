import type { SubjectStrategy } from './options.js';

/** Which part of a message a schema is for. */
export type MessagePart = 'value' | 'key';

/**
 * A schema's registry subject under Confluent's strategies: TopicName `<topic>-value` /
 * `<topic>-key`; RecordName the record name (Avro full name `namespace.name`, Protobuf
 * `package.Message`, JSON Schema `title`); TopicRecordName `<topic>-<record name>`.
 *
 * @throws Error when the strategy needs a record name and the schema has none
 */
export function subjectName(strategy: SubjectStrategy, topic: string, part: MessagePart, recordName: string | undefined): string {
  if (strategy === 'TopicName') return `${topic}-${part}`;
  if (recordName === undefined || recordName === '') {
    throw new Error(`subject strategy ${strategy} needs a record name (an Avro record, a Protobuf message, a JSON Schema "title")`);
  }
  return strategy === 'RecordName' ? recordName : `${topic}-${recordName}`;
}

/** Whether a strategy's subject depends on the topic (it then resolves per topic). */
export function subjectNamesTopic(strategy: SubjectStrategy): boolean {
  return strategy !== 'RecordName';
}
