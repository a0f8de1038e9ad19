/**
 * PgBouncer for the tests: a real one (Debian's package, installed when missing) in front
 * of the local Postgres. The logic lives in scripts/pgbouncer.ts, which is also the CLI
 * (start/stop/restart --dir DIR) for the fault suite and for trying things by hand.
 */
export { startPgBouncer, type PgBouncer, type PgBouncerOptions, type PoolMode } from '../../scripts/pgbouncer.js';
