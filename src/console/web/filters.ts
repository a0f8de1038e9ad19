import { resolveFilter } from '../../commands/deadLetterSelection.js';
import { ConfigError } from '../../shared/errors.js';
import { html, type Html } from './html.js';
import type { ConsoleDeadLetterFilter } from '../model.js';
import { HttpError } from './http.js';

// The dead-letter filter as it travels between pages: query parameters of the list's
// form, hidden fields of a confirmation form, and back. Checked by the same rules as the
// CLI's (resolveFilter), so the console accepts what `dead-letters list` accepts.

/** The filter's fields, in the order the form shows them. */
export const FILTER_FIELDS = ['topic', 'key', 'reason', 'errorName', 'since', 'until', 'policy'] as const;
type FilterField = (typeof FILTER_FIELDS)[number];

/** Longest filter text taken (a topic, a key, a reason fragment). */
const MAX_TEXT = 1_000;
/** Most ids one selection may name (a page of the list holds at most 100). */
export const MAX_SELECTED_IDS = 1_000;

/**
 * The filter in `params` (empty fields are unset), checked.
 *
 * @throws HttpError 400 naming the field
 */
export function filterFrom(params: URLSearchParams): ConsoleDeadLetterFilter {
  const f: ConsoleDeadLetterFilter = {};
  for (const field of FILTER_FIELDS) {
    const raw = params.get(field);
    if (raw === null || raw.trim() === '') continue;
    const value = field === 'key' ? raw : raw.trim();
    if (value.length > MAX_TEXT) throw new HttpError(400, `The ${label(field)} is longer than ${MAX_TEXT} characters.`);
    checkText(label(field), value);
    if (field === 'policy') {
      if (value !== 'park' && value !== 'skip') throw new HttpError(400, 'The policy is park or skip.');
      f.policy = value;
    } else {
      f[field] = value;
    }
  }
  checkFilter(f);
  return f;
}

/**
 * Text from a request that goes into a query: Postgres' text holds no NUL character (no
 * topic, key or reason has one), and a query given one fails; refused here with a 400.
 *
 * @throws HttpError 400 naming `what`
 */
export function checkText(what: string, value: string): void {
  if (value.includes('\u0000')) throw new HttpError(400, `The ${what} contains a NUL character, which no ${what} can hold.`);
}

/** The ids of a selection (`id` parameters), checked. */
export function idsFrom(params: URLSearchParams): number[] {
  const raw = params.getAll('id').flatMap((v) => v.split(',')).map((v) => v.trim()).filter((v) => v !== '');
  if (raw.length === 0) throw new HttpError(400, 'No dead letter is selected: tick the ones to act on, or act on every match of the filter.');
  if (raw.length > MAX_SELECTED_IDS) throw new HttpError(400, `At most ${MAX_SELECTED_IDS} dead letters can be selected by id; use a filter.`);
  const ids = raw.map((v) => (/^\d{1,15}$/.test(v) ? Number(v) : NaN));
  if (ids.some((id) => !Number.isSafeInteger(id) || id < 1)) throw new HttpError(400, 'A selected id is not a dead letter id.');
  return [...new Set(ids)].sort((a, b) => a - b);
}

/** Check the filter by the CLI's rules; HttpError 400 with the rule's words. */
export function checkFilter(f: ConsoleDeadLetterFilter): void {
  try {
    resolveFilter(f, new Date());
  } catch (error) {
    if (error instanceof ConfigError) throw new HttpError(400, `The ${label(error.setting as FilterField)} ${error.message.slice(error.setting.length + 2)}.`);
    throw error;
  }
}

function label(field: FilterField | string): string {
  switch (field) {
    case 'errorName':
      return 'error name';
    case 'since':
      return '"since" time';
    case 'until':
      return '"until" time';
    default:
      return field;
  }
}

/** Whether the filter narrows anything. */
export function isEmptyFilter(f: ConsoleDeadLetterFilter): boolean {
  return FILTER_FIELDS.every((k) => f[k] === undefined);
}

/** The filter as query parameters (for links to the next page, to a confirmation). */
export function filterParams(f: ConsoleDeadLetterFilter): URLSearchParams {
  const out = new URLSearchParams();
  for (const k of FILTER_FIELDS) {
    const v = f[k];
    if (v !== undefined) out.set(k, v instanceof Date ? v.toISOString() : v);
  }
  return out;
}

/** `?a=b&…`, or '' when there are none. */
export function queryString(params: URLSearchParams): string {
  const s = params.toString();
  return s ? `?${s}` : '';
}

/** The filter as hidden fields of a form. */
export function filterHiddenFields(f: ConsoleDeadLetterFilter): Html {
  return html`${[...filterParams(f)].map(([k, v]) => html`<input type="hidden" name="${k}" value="${v}">`)}`;
}

/** The filter for people: `topic "orders", error name "MESSAGE_TOO_LARGE"`, or every dead letter. */
export function describeFilter(f: ConsoleDeadLetterFilter): string {
  const parts = FILTER_FIELDS.filter((k) => f[k] !== undefined).map((k) => {
    const v = f[k]!;
    return `${label(k).replace(/"/g, '')} ${JSON.stringify(v instanceof Date ? v.toISOString() : v)}`;
  });
  return parts.length ? parts.join(', ') : 'every dead letter';
}
