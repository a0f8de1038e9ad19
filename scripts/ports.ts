/**
 * Free ports for the servers the tests, the demo and the benchmarks start (Kafka, Postgres,
 * PgBouncer, Redis). A port is free when it is picked, and the server binds it seconds later
 * (a JVM takes that long), and binds it again on every restart of the fault suite. A port
 * the kernel hands out (listen on port 0) comes from the ephemeral range, the one every
 * outgoing connection on the machine takes its own port from: on a busy machine one of them
 * takes the port in between, and the server fails with "Address already in use" (CI's fault
 * suite once failed at its start that way). So ports are picked at random below that range,
 * where only servers bind; a collision with another server's pick is still possible, and a
 * start that hits one is tried again on new ports (startOnFreePorts).
 */
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';

/** What Kafka (java.net.BindException), Postgres and PgBouncer print when a port was taken. */
export const PORT_TAKEN = /Address already in use|BindException/;

/** Where ports come from: `freePorts` unless a test hands out its own. */
export type PortSource = (count: number) => Promise<number[]>;

/** The kernel's range for the ports of outgoing connections (net.ipv4.ip_local_port_range). */
export function ephemeralRange(text = readRange()): [number, number] {
  const [low, high] = text.trim().split(/\s+/).map(Number);
  return Number.isInteger(low) && Number.isInteger(high) ? [low as number, high as number] : [32768, 60999];
}

function readRange(): string {
  try {
    return readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8');
  } catch {
    return '';
  }
}

/** Ports to pick from: 10000 up to the ephemeral range, or above it when that is wider; none
 *  (the kernel's choice) when neither leaves 1000 ports. */
export function pickRange([low, high]: [number, number]): [number, number] | undefined {
  const below: [number, number] = [10000, low - 1];
  const above: [number, number] = [high + 1, 65535];
  const best = below[1] - below[0] >= above[1] - above[0] ? below : above;
  return best[1] - best[0] >= 1000 ? best : undefined;
}

/** Listen on `port` (0: the kernel's choice); undefined when it is taken. */
function listen(port: number): Promise<Server | undefined> {
  return new Promise((resolveServer, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', (error: NodeJS.ErrnoException) => (error.code === 'EADDRINUSE' || error.code === 'EACCES' ? resolveServer(undefined) : reject(error)));
    server.listen({ port, host: '127.0.0.1', exclusive: true }, () => resolveServer(server));
  });
}

/** `count` distinct ports free on 127.0.0.1 now: all held open at once, then released. */
export async function freePorts(count: number): Promise<number[]> {
  const range = pickRange(ephemeralRange());
  const servers: Server[] = [];
  try {
    for (let tries = 0; servers.length < count; tries++) {
      if (tries > 100 * count) throw new Error(`no ${count} free ports found in ${range?.join('-')} after ${tries} tries`);
      const port = range ? range[0] + Math.floor(Math.random() * (range[1] - range[0] + 1)) : 0;
      const server = await listen(port);
      if (server) servers.push(server);
    }
    return servers.map((s) => {
      const address = s.address();
      if (typeof address !== 'object' || !address) throw new Error('no port');
      return address.port;
    });
  } finally {
    await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  }
}

/** One port free on 127.0.0.1 now. */
export async function freePort(): Promise<number> {
  return (await freePorts(1))[0] as number;
}

/**
 * Run `start` on `count` new ports; when it fails and `portTaken(error)` says a port was
 * taken before the server bound it, try again on new ports, `attempts` times in all. Any
 * other failure, or the last attempt's, is thrown as it is.
 */
export async function startOnFreePorts<T>(
  count: number,
  start: (ports: number[]) => Promise<T>,
  portTaken: (error: unknown) => boolean,
  { attempts = 3, source = freePorts }: { attempts?: number; source?: PortSource } = {},
): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    const ports = await source(count);
    try {
      return await start(ports);
    } catch (error) {
      if (attempt >= attempts || !portTaken(error)) throw error;
    }
  }
}
