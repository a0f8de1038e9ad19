/**
 * Which server and database a connection reached, whatever URL led there (127.0.0.1 or
 * localhost, a pooler or not): what the relay group compares to refuse two entries of
 * its list on one outbox (src/relay/outboxPlace.ts).
 *
 *   system     pg_control_system()'s system identifier, drawn at initdb and kept by
 *              physical replicas and clones of the data directory;
 *   started    when the postmaster started, which tells such clones apart (each was
 *              started on its own) and is the same for every connection to one server;
 *   database   the database the connection is in (a pooler's alias resolved).
 *
 * pg_control_system() is executable by any role (no grant needed).
 */
export const SERVER_IDENTITY = `
SELECT system_identifier::text AS system,
       pg_postmaster_start_time()::text AS started,
       current_database() AS database
  FROM pg_control_system()`;
