import { html, type Html } from './html.js';
import type { CappedCount } from '../model.js';

// How the pages write numbers, ages, times and payloads.

const NUMBER = new Intl.NumberFormat('en-US');

export function formatNumber(n: number): string {
  return NUMBER.format(n);
}

/** A capped count: exact, "10,000+" past its cap, or Postgres' estimate ("about 1,200,000") where known. */
export function formatCount(c: CappedCount): string {
  if (!c.capped) return NUMBER.format(c.count);
  return c.estimate !== undefined && c.estimate > c.count ? `about ${NUMBER.format(c.estimate)}` : `${NUMBER.format(c.count)}+`;
}

/** An age in seconds as people say it: 42 s, 3 min 5 s, 2 h 10 min, 3 d 4 h. */
export function formatAge(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3_600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  if (s < 86_400) return `${Math.floor(s / 3_600)} h ${Math.floor((s % 3_600) / 60)} min`;
  return `${Math.floor(s / 86_400)} d ${Math.floor((s % 86_400) / 3_600)} h`;
}

/** A time in UTC, to the second, as a <time> element. */
export function formatTime(d: Date): Html {
  const iso = d.toISOString();
  return html`<time datetime="${iso}">${iso.slice(0, 19).replace('T', ' ')} UTC</time>`;
}

/** At most this many bytes of a binary payload are shown. */
export const HEX_DUMP_MAX_BYTES = 64 * 1024;

/** `00000010  7b 22 61 22 ...  |{"a"...|`: 16 bytes a line, offset, hex and printable ASCII. */
export function hexDump(bytes: Buffer, maxBytes = HEX_DUMP_MAX_BYTES): string {
  const lines: string[] = [];
  const end = Math.min(bytes.length, maxBytes);
  for (let at = 0; at < end; at += 16) {
    const row = bytes.subarray(at, Math.min(at + 16, end));
    const hex = [...row].map((b) => b.toString(16).padStart(2, '0')).join(' ');
    const ascii = [...row].map((b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : '.')).join('');
    lines.push(`${at.toString(16).padStart(8, '0')}  ${hex.padEnd(47)}  |${ascii}|`);
  }
  if (bytes.length > end) lines.push(`… ${NUMBER.format(bytes.length - end)} more bytes not shown`);
  return lines.join('\n');
}

/** Nesting deeper than this is not indented further (10,000 levels would make lines of 20,000 spaces). */
export const JSON_INDENT_LEVELS = 32;
/** At most this many characters of a JSON payload are shown. */
export const JSON_MAX_CHARS = 512 * 1024;

/**
 * JSON text (as Postgres writes jsonb) indented by two spaces a level, in one pass without
 * recursion, so a payload nesting 10,000 deep prints as well as a flat one. Past
 * {@link JSON_INDENT_LEVELS} levels lines are no longer indented further; past
 * {@link JSON_MAX_CHARS} characters the rest is left out, and a last line says how much.
 */
export function prettyJsonText(text: string, maxChars = JSON_MAX_CHARS): string {
  let out = '';
  let depth = 0;
  const newline = (): string => `\n${'  '.repeat(Math.min(depth, JSON_INDENT_LEVELS))}`;
  let i = 0;
  const n = text.length;
  while (i < n && out.length < maxChars) {
    const c = text[i]!;
    if (c === '"') {
      // A string, copied as it is up to its closing quote (a backslash escapes one character).
      let j = i + 1;
      while (j < n && text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      out += text.slice(i, j + 1);
      i = j + 1;
      continue;
    }
    if (c === ' ' || c === '\n' || c === '\t' || c === '\r') {
      i++;
      continue;
    }
    if (c === '{' || c === '[') {
      let j = i + 1;
      while (j < n && (text[j] === ' ' || text[j] === '\n' || text[j] === '\t' || text[j] === '\r')) j++;
      if (text[j] === (c === '{' ? '}' : ']')) {
        out += c === '{' ? '{}' : '[]';
        i = j + 1;
        continue;
      }
      depth++;
      out += c + newline();
    } else if (c === '}' || c === ']') {
      depth = Math.max(0, depth - 1);
      out += newline() + c;
    } else if (c === ',') {
      out += `,${newline()}`;
    } else if (c === ':') {
      out += ': ';
    } else {
      out += c;
    }
    i++;
  }
  if (i < n) out += `\n… ${NUMBER.format(n - i)} more characters of the payload not shown`;
  return out;
}
