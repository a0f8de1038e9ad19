import { AsyncLocalStorage } from 'node:async_hooks';
import net from 'node:net';
import { testBrokers } from './kafka.js';

export interface PausableBroker {
  /**
   * Run `start` (e.g. `() => relay.start()`) so that the sockets it and everything it
   * starts open later (its loops, reconnections) are the ones {@link pause} holds.
   */
  own<T>(start: () => T): T;
  /** From now on, writes of owned sockets are held: the broker sees nothing, a request waits for its answer. */
  pause(): void;
  /** Write what was held, in order, and stop holding. */
  resume(): void;
  /** Resume and put the socket layer back as it was. */
  restore(): void;
}

/**
 * A slow broker, on the real one, for either producer adapter. kafkajs and
 * @platformatic/kafka both connect and write through `net.Socket`, so a socket opened in
 * an owned context is tagged at connect and its writes are held while paused. The
 * test's own clients (readTopic) are not owned, and only writes to `brokers` are held
 * (the owned relay's Postgres connections are untouched).
 */
export function pausableBroker(brokers: string[] = testBrokers()): PausableBroker {
  const ports = new Set(brokers.map((b) => Number(b.slice(b.lastIndexOf(':') + 1))));
  const owner = new AsyncLocalStorage<true>();
  const owned = new WeakSet<net.Socket>();
  const proto = net.Socket.prototype as unknown as Record<'connect' | 'write', (...args: unknown[]) => unknown>;
  const own = { connect: Object.prototype.hasOwnProperty.call(proto, 'connect'), write: Object.prototype.hasOwnProperty.call(proto, 'write') };
  const { connect, write } = proto;
  let paused = false;
  const held: Array<() => void> = [];
  proto.connect = function (this: net.Socket, ...args: unknown[]) {
    if (owner.getStore()) owned.add(this);
    return connect.apply(this, args);
  };
  proto.write = function (this: net.Socket, ...args: unknown[]) {
    if (paused && owned.has(this) && this.remotePort !== undefined && ports.has(this.remotePort)) {
      held.push(() => void write.apply(this, args));
      return true;
    }
    return write.apply(this, args);
  };
  const resume = (): void => {
    paused = false;
    for (const flush of held.splice(0)) flush();
  };
  return {
    own: (start) => owner.run(true, start),
    pause: () => {
      paused = true;
    },
    resume,
    restore: () => {
      resume();
      for (const name of ['connect', 'write'] as const) {
        if (own[name]) proto[name] = name === 'connect' ? connect : write;
        else delete proto[name];
      }
    },
  };
}
