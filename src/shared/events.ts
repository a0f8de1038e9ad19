import { EventEmitter } from 'node:events';

/**
 * An EventEmitter whose event names and payloads are checked by the compiler.
 * `Events` maps each event name to its payload type.
 *
 * Listeners observe; they can never change an outcome. A listener that throws (or
 * returns a promise that rejects) is reported to {@link TypedEmitter.listenerFailed} and
 * the other listeners still run: a broken metrics hook must not turn a committed batch
 * into a failed one.
 */
export class TypedEmitter<Events extends { [K in keyof Events]: unknown }> {
  private readonly emitter = new EventEmitter();

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
    // rawListeners: calling a once() wrapper also removes it.
    for (const listener of this.emitter.rawListeners(event) as Array<(payload: Events[K]) => unknown>) {
      try {
        const result = listener(payload);
        if (result && typeof (result as Promise<unknown>).then === 'function') {
          (result as Promise<unknown>).then(undefined, (error: unknown) => this.listenerFailed(event, error));
        }
      } catch (error) {
        this.listenerFailed(event, error);
      }
    }
  }

  /** Called when a listener of `event` threw; subclasses log it. */
  protected listenerFailed(_event: string, _error: unknown): void {}
}
