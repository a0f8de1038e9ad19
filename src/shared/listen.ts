import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * Start `server` on `host`:`port` (0: any free port) and give the address it got, with its
 * origin (`http://127.0.0.1:9464`, an IPv6 address in brackets). Rejects with the listen error
 * (the port taken, an address not of this host) instead of leaving it to an 'error'
 * event nobody listens to.
 */
export async function listenOn(server: Server, port: number, host: string): Promise<{ host: string; port: number; origin: string }> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const address = server.address() as AddressInfo;
  const bound = address.address;
  return { host: bound, port: address.port, origin: `http://${bound.includes(':') ? `[${bound}]` : bound}:${address.port}` };
}
