import { connect, describeDatabase } from '../shared/database.js';
import { ConfigError } from '../shared/errors.js';
import { SERVER_IDENTITY } from './sql/serverIdentity.js';

/**
 * Where an outbox of a relay group really is: the server and database its connection
 * reached, and its schema. Two entries of a list that name one server differently
 * (127.0.0.1 and localhost, a pooler and the server behind it) have the same place,
 * which the URL's text cannot show.
 */
export interface OutboxPlace {
  /** Server identity, database and schema in one comparable string. */
  key: string;
  /** For messages: the database as the URL names it, without user info. */
  database: string;
}

/**
 * Connect once to an outbox's database and read its place.
 *
 * @throws ConnectionError (retriable) when the database does not answer
 */
export async function readOutboxPlace(databaseUrl: string, schema: string, applicationName: string): Promise<OutboxPlace> {
  const client = await connect(databaseUrl, applicationName);
  try {
    const { rows } = await client.query<{ system: string; started: string; database: string }>(SERVER_IDENTITY);
    const r = rows[0]!;
    return { key: `server ${r.system} started ${r.started}, database ${r.database}, schema ${schema}`, database: describeDatabase(databaseUrl) };
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * The outboxes of one group, by place: refuses a second entry on the place of another.
 * Entries are added as they are reached (at start, or later for a database down then).
 */
export class OutboxPlaces {
  private readonly byKey = new Map<string, { name: string; place: OutboxPlace }>();

  /** @throws ConfigError naming both entries when `name` is where another outbox of the list is */
  claim(name: string, place: OutboxPlace): void {
    const other = this.byKey.get(place.key);
    if (other && other.name !== name) {
      throw new ConfigError(
        `outbox ${name}`,
        `is the same outbox as outbox ${other.name}: ${place.database} and ${other.place.database} reach one ${place.key}; list it once`,
      );
    }
    this.byKey.set(place.key, { name, place });
  }
}
