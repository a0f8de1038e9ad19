import type pg from 'pg';
import { connect } from '../shared/database.js';
import { describeError } from '../shared/errors.js';
import { backoffDelayMs } from '../shared/backoff.js';
import type { Logger } from '../shared/logger.js';
import { WakeUp } from '../relay/wakeUp.js';
import { INSERT_CHANNEL } from './sql/tenantQueries.js';

/**
 * The tenant relay's one standing connection, to the rule's database: it LISTENs for the
 * insert trigger's notifications and runs discovery and the activity checks. When it
 * drops it is opened again with backoff; notifications sent meanwhile are lost, so each
 * new connection is reported (`onConnected`) and the tenant relay sweeps every tenant.
 */
export class ControlConnection {
  private client: pg.Client | undefined;
  private stopping = false;
  private readonly stopped = new WakeUp();
  private loop: Promise<void> | undefined;

  constructor(
    private readonly url: string,
    private readonly applicationName: string,
    private readonly logger: Logger,
    private readonly onNotification: (schema: string) => void,
    private readonly onConnected: () => void,
  ) {}

  /** Open the connection; resolves when the first attempt ended, rejects with its error. */
  start(): Promise<void> {
    let settle!: (error?: unknown) => void;
    const firstAttempt = new Promise<void>((resolve, reject) => (settle = (e) => (e === undefined ? resolve() : reject(e))));
    this.loop = this.keepOpen(settle);
    return firstAttempt;
  }

  private async keepOpen(settle: (error?: unknown) => void): Promise<void> {
    for (let attempt = 0; !this.stopping; ) {
      try {
        const client = await connect(this.url, this.applicationName);
        const lost = new Promise<void>((resolve) => {
          client.on('error', (error) => {
            this.logger.warn({ err: describeError(error) }, 'tenant relay: the control connection failed; opening it again');
            resolve();
          });
          client.on('end', () => resolve());
        });
        client.on('notification', (n) => {
          if (n.channel === INSERT_CHANNEL && n.payload) this.onNotification(n.payload);
        });
        await client.query(`LISTEN ${INSERT_CHANNEL}`);
        this.client = client;
        attempt = 0;
        settle();
        this.onConnected();
        if (!this.stopping) await Promise.race([lost, this.stopped.wait(2 ** 31 - 1)]);
        this.client = undefined;
        await client.end().catch(() => undefined);
      } catch (error) {
        if (attempt === 0) settle(error);
        const delay = backoffDelayMs(attempt++, 250, 10_000);
        this.logger.warn({ err: describeError(error), retryInMs: delay }, 'tenant relay: cannot open the control connection; retrying');
        if (!this.stopping) await this.stopped.wait(delay);
      }
    }
  }

  /**
   * Run a statement on the control connection; rejects while it is down. One at a time:
   * discovery, the sweep, the statistics and the checks all use it (node-pg queues them
   * itself, but deprecates being asked to).
   */
  query<R extends pg.QueryResultRow>(sql: string, params?: unknown[]): Promise<pg.QueryResult<R>> {
    const run = this.queue.then(() => {
      if (!this.client) throw new Error('the control connection is down');
      return this.client.query<R>(sql, params);
    });
    this.queue = run.then(() => undefined, () => undefined);
    return run;
  }

  private queue: Promise<void> = Promise.resolve();

  /** The open connection, for statements that need a client (discovery), or undefined while down. */
  get current(): pg.Client | undefined {
    return this.client;
  }

  async stop(): Promise<void> {
    this.stopping = true;
    this.stopped.notify();
    await this.loop;
  }
}
