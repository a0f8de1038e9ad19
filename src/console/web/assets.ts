import { createHash } from 'node:crypto';
import { CONSOLE_CSS } from './styles.js';
import { CONSOLE_JS } from './script.js';

// The stylesheet and the script, served from the package itself (they are modules, so
// the build ships them with the code; no file to find at run time). Each is named by its
// content hash, cached for good, and linked with its Subresource Integrity hash.

/** One static file of the console. */
export interface Asset {
  /** File name under /static/, with the content's hash in it. */
  name: string;
  type: string;
  body: Buffer;
  /** `sha256-…`: the integrity attribute of the element that loads it. */
  integrity: string;
}

function asset(base: string, ext: string, type: string, text: string): Asset {
  const body = Buffer.from(text, 'utf8');
  const digest = createHash('sha256').update(body).digest();
  return { name: `${base}.${digest.toString('hex').slice(0, 16)}.${ext}`, type, body, integrity: `sha256-${digest.toString('base64')}` };
}

export const STYLESHEET: Asset = asset('console', 'css', 'text/css; charset=utf-8', CONSOLE_CSS);
export const SCRIPT: Asset = asset('console', 'js', 'text/javascript; charset=utf-8', CONSOLE_JS);

/** The assets by file name. */
export const ASSETS: ReadonlyMap<string, Asset> = new Map([STYLESHEET, SCRIPT].map((a) => [a.name, a]));
