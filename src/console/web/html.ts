// HTML built by a tagged template that escapes every interpolation: a page can only hold
// markup that was written as markup in this folder. Values (a dead letter's key, a
// reason from Kafka, a payload) are text, always; `Html` values (already built with
// `html`) are inserted as they are; arrays are joined; null, undefined and false vanish.

/** Markup built by {@link html}: safe to insert into another template as it is. */
export class Html {
  constructor(readonly text: string) {}
  toString(): string {
    return this.text;
  }
}

/** What may be interpolated into {@link html}. */
export type HtmlValue = Html | string | number | boolean | null | undefined | readonly HtmlValue[];

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;', '`': '&#96;' };

/** Text as HTML text or an attribute value (quoted with " or '). */
export function escapeHtml(text: string): string {
  return text.replace(/[&<>"'`]/g, (c) => ESCAPES[c]!);
}

function render(value: HtmlValue): string {
  if (value === null || value === undefined || value === false) return '';
  if (value instanceof Html) return value.text;
  if (Array.isArray(value)) return value.map(render).join('');
  return escapeHtml(String(value));
}

/**
 * `html\`<td>${d.key}</td>\``: every `${}` escaped unless it is `Html`. Interpolate
 * attribute values only inside quotes (`href="${url}"`), never as a bare attribute name.
 */
export function html(strings: TemplateStringsArray, ...values: HtmlValue[]): Html {
  let out = strings[0]!;
  for (let i = 0; i < values.length; i++) out += render(values[i]!) + strings[i + 1]!;
  return new Html(out);
}
