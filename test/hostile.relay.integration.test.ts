// The hostile-input suite, the classes whose cases start a relay: odd rows, HTTP, signals
// (test/hostile/cases.ts), on the real Postgres and broker; CI's second pass runs this file
// again on the other producer adapter. The other classes are in hostile.integration.test.ts.
import { hostileSuite } from './hostile/suite.js';

hostileSuite('relay');
