/**
 * Short descriptions of values and paths for RowEncodingError messages: enough to find
 * the field, never a whole payload.
 */

const MAX_QUOTED = 40;

/** `string "abc"`, `number 1.5`, `null`, `nothing`, `an object`, `an array of 3`. */
export function describeValue(value: unknown): string {
  if (value === undefined) return 'nothing (the field is missing)';
  if (value === null) return 'null';
  if (Array.isArray(value)) return `an array of ${value.length}`;
  if (Buffer.isBuffer(value)) return `${value.length} bytes`;
  switch (typeof value) {
    case 'string':
      return `string ${quote(value)}`;
    case 'number':
    case 'boolean':
    case 'bigint':
      return `${typeof value} ${String(value)}`;
    case 'object':
      return 'an object';
    default:
      return typeof value;
  }
}

/** A JSON string of at most ~40 characters. */
export function quote(text: string): string {
  return text.length <= MAX_QUOTED ? JSON.stringify(text) : `${JSON.stringify(text.slice(0, MAX_QUOTED))}…`;
}

/** `items[0].sku` from ['items', '0', 'sku'] (array positions in brackets). */
export function joinPath(path: ReadonlyArray<string | number>): string {
  let out = '';
  for (const part of path) {
    const text = String(part);
    if (/^\d+$/.test(text)) out += `[${text}]`;
    else out += out === '' ? text : `.${text}`;
  }
  return out;
}

/** `field amount` or `the value` (the top level). */
export function fieldName(path: string): string {
  return path === '' ? 'the value' : `field ${path}`;
}
