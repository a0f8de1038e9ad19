import { EventEmitter } from 'node:events';

/**
 * An EventEmitter whose event names and payloads are checked by the compiler.
 * `Events` maps each event name to its payload type.
 */
export class TypedEmitter<Events extends { [K in keyof Events]: unknown }> {
  private readonly emitter = new EventEmitter();

  constructor() {
    // Hooks are optional: an 'error' event without a listener must not throw.
    this.emitter.on('error', () => undefined);
  }

  on<K extends keyof Events & string>(event: K, listener: (payload: Events[K]) => void): this {
    this.emitter.on(event, listener);
    return this;
  }

  once<K extends keyof Events & string>(event: K, listener: (payload: Events[K]) => void): this {
    this.emitter.once(event, listener);
    return this;
  }

  off<K extends keyof Events & string>(event: K, listener: (payload: Events[K]) => void): this {
    this.emitter.off(event, listener);
    return this;
  }

  protected emit<K extends keyof Events & string>(event: K, payload: Events[K]): void {
    this.emitter.emit(event, payload);
  }
}
