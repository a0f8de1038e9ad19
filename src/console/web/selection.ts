import { html, type Html } from './html.js';
import { HttpError } from './http.js';
import { describeFilter, filterFrom, filterHiddenFields, filterParams, idsFrom, isEmptyFilter } from './filters.js';
import type { ConsoleDeadLetterFilter } from '../model.js';

// What an action acts on: dead letters picked by id, every match of a filter, or every
// dead letter (scope `all`, the CLI's --all: an empty filter is never taken for "all" by
// accident).

export type Selection =
  | { scope: 'ids'; ids: number[] }
  | { scope: 'filter'; filter: ConsoleDeadLetterFilter }
  | { scope: 'all' };

/** The selection in a request's parameters (scope, then ids or the filter). */
export function selectionFrom(params: URLSearchParams): Selection {
  const scope = params.get('scope');
  if (scope === 'ids') return { scope, ids: idsFrom(params) };
  const filter = filterFrom(params);
  if (scope === 'filter') {
    if (isEmptyFilter(filter)) throw new HttpError(400, 'The filter is empty: to act on every dead letter, say so (scope all).');
    return { scope, filter };
  }
  if (scope === 'all') {
    if (!isEmptyFilter(filter)) throw new HttpError(400, 'Scope all takes no filter.');
    return { scope };
  }
  throw new HttpError(400, 'Say what to act on: scope ids, filter or all.');
}

/** The selection as the command's filter options (ids, or the filter, or all). */
export function selectionOptions(s: Selection): ConsoleDeadLetterFilter & { all?: boolean } {
  if (s.scope === 'ids') return { ids: s.ids };
  if (s.scope === 'filter') return { ...s.filter };
  return { all: true };
}

/** The selection as a filter to count and list with (all: no filter). */
export function selectionFilter(s: Selection): ConsoleDeadLetterFilter {
  if (s.scope === 'ids') return { ids: s.ids };
  if (s.scope === 'filter') return s.filter;
  return {};
}

/** For people and the audit log. */
export function describeSelection(s: Selection): string {
  if (s.scope === 'ids') return s.ids.length === 1 ? `dead letter ${s.ids[0]}` : `dead letters ${s.ids.join(', ')}`;
  if (s.scope === 'filter') return `dead letters matching ${describeFilter(s.filter)}`;
  return 'every dead letter';
}

/** The selection as the audit log records it. */
export function auditSelection(s: Selection): Record<string, unknown> {
  if (s.scope === 'ids') return { ids: s.ids };
  if (s.scope === 'filter') return { filter: Object.fromEntries(filterParams(s.filter)) };
  return { all: true };
}

/** The selection as hidden fields of a form. */
export function selectionFields(s: Selection): Html {
  if (s.scope === 'ids') return html`<input type="hidden" name="scope" value="ids">${s.ids.map((id) => html`<input type="hidden" name="id" value="${id}">`)}`;
  if (s.scope === 'filter') return html`<input type="hidden" name="scope" value="filter">${filterHiddenFields(s.filter)}`;
  return html`<input type="hidden" name="scope" value="all">`;
}
