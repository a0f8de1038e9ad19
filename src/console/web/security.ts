import type { IncomingMessage, ServerResponse } from 'node:http';

// Headers every response carries, and the check that a state-changing request comes from
// the console's own pages (besides its CSRF token, which the server checks per session).

/**
 * Nothing but the console's own stylesheet and script; no inline script or style (the
 * chart is SVG with classes), no framing, forms post only here. `connect-src 'self'` lets
 * the job page's script read its progress.
 */
export const CONTENT_SECURITY_POLICY =
  "default-src 'none'; style-src 'self'; script-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/** Set the security headers on a response (pages and assets alike). */
export function setSecurityHeaders(res: ServerResponse): void {
  res.setHeader('content-security-policy', CONTENT_SECURITY_POLICY);
  res.setHeader('x-content-type-options', 'nosniff');
  res.setHeader('referrer-policy', 'no-referrer');
  res.setHeader('x-frame-options', 'DENY');
  res.setHeader('cross-origin-opener-policy', 'same-origin');
  res.setHeader('cross-origin-resource-policy', 'same-origin');
  res.setHeader('permissions-policy', 'camera=(), microphone=(), geolocation=(), payment=(), usb=()');
}

function header(req: IncomingMessage, name: string): string | undefined {
  const v = req.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/**
 * Why a POST does not come from the console's own pages, or undefined when it does.
 *
 * Browsers say where a request comes from: `Sec-Fetch-Site` (must be same-origin when
 * sent) and `Origin` (must be the public origin when configured, else name the host the
 * request was sent to: `Host`, or `X-Forwarded-Host` behind a proxy; `null`, which the
 * console's no-referrer policy makes browsers send, only with Sec-Fetch-Site same-origin). A client that sends
 * neither (curl, a script) is not a browser a page could abuse; its CSRF token is still
 * checked.
 */
export function crossOriginProblem(req: IncomingMessage, publicOrigin: string): string | undefined {
  const site = header(req, 'sec-fetch-site');
  if (site !== undefined && site !== 'same-origin') return `the request comes from another site (Sec-Fetch-Site: ${site.slice(0, 20)})`;
  const origin = header(req, 'origin');
  if (origin === undefined) return undefined;
  // Under Referrer-Policy: no-referrer a browser sends `Origin: null` with a form's POST;
  // then Sec-Fetch-Site (which it sends too) is what says where the form came from.
  if (origin === 'null') return site === 'same-origin' ? undefined : 'the request comes from an opaque origin';
  if (publicOrigin !== '') return origin === publicOrigin ? undefined : 'the request comes from another origin than --public-origin';
  let host: string;
  try {
    const url = new URL(origin);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') return 'the request comes from an opaque origin';
    host = url.host;
  } catch {
    return 'the request comes from an opaque origin';
  }
  const targets = [header(req, 'host'), ...(header(req, 'x-forwarded-host') ?? '').split(',').map((h) => h.trim())].filter((h) => h);
  return targets.some((t) => t!.toLowerCase() === host.toLowerCase())
    ? undefined
    : 'the request comes from another origin than the host it was sent to (behind a proxy, set --public-origin)';
}
