import type { TestSchema } from '../helpers/db.js';

// What a hostile-input case is (test/hostile/cases.ts lists them; ./suite.ts runs them).

export type CaseClass = 'config' | 'schema state' | 'odd rows' | 'operator' | 'consumer library' | 'secrets' | 'http' | 'signals';

export interface HostileCase {
  class: CaseClass;
  name: string;
  /** Fails today because of a bug another engineer of issue 11 is fixing (which one). */
  knownBug?: string;
  run(world: World): Promise<void>;
}

/** The shared base every "changes nothing" case runs against: a migrated schema with
 *  pending rows for its own topic and one dead letter. Nothing may ever touch them. */
export interface World {
  base: TestSchema;
  topic: string;
  deadLetterId: number;
}
