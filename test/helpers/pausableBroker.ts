import net from 'node:net';
import { testBrokers } from './kafka.js';

export interface PausableBroker {
  /** From now on, writes to the brokers are held: the broker sees nothing, a request waits for its answer. */
  pause(): void;
  /** Write what was held, in order, and stop holding. */
  resume(): void;
  /** Resume and put the socket layer back as it was. */
  restore(): void;
}

/**
 * A slow broker, on the real one, for either producer adapter: every write this process
 * makes to a socket connected to one of `brokers` is held while paused. Both kafkajs and
 * @platformatic/kafka write through `net.Socket`, so this holds what a kafkajs socket
 * factory could only hold for kafkajs. Other sockets (Postgres) are untouched.
 */
export function pausableBroker(brokers: string[] = testBrokers()): PausableBroker {
  const ports = new Set(brokers.map((b) => Number(b.slice(b.lastIndexOf(':') + 1))));
  const original = Object.prototype.hasOwnProperty.call(net.Socket.prototype, 'write') ? net.Socket.prototype.write : undefined;
  const write = net.Socket.prototype.write;
  let paused = false;
  const held: Array<() => void> = [];
  net.Socket.prototype.write = function (this: net.Socket, ...args: unknown[]) {
    if (paused && this.remotePort !== undefined && ports.has(this.remotePort)) {
      held.push(() => void (write as (...a: unknown[]) => boolean).apply(this, args));
      return true;
    }
    return (write as (...a: unknown[]) => boolean).apply(this, args);
  } as typeof net.Socket.prototype.write;
  const resume = (): void => {
    paused = false;
    for (const flush of held.splice(0)) flush();
  };
  return {
    pause: () => {
      paused = true;
    },
    resume,
    restore: () => {
      resume();
      if (original) net.Socket.prototype.write = original;
      else delete (net.Socket.prototype as { write?: unknown }).write;
    },
  };
}
