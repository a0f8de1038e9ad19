// Durations and points in time as operators type them: `7d`, `12h`, `30m`, `45s`,
// `1h30m`, or an ISO 8601 timestamp where a point in time is meant.

const UNIT_MS: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 604_800_000,
};

const DURATION = /^(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+$/;
const PART = /(\d+(?:\.\d+)?)(ms|s|m|h|d|w)/g;
const ACCEPTS = 'a duration such as 45s, 30m, 12h, 7d or 1h30m';

/**
 * `7d`, `12h`, `30m`, `45s`, `250ms`, `2w`, or several of them (`1h30m`), in milliseconds.
 * No sign and no bare numbers: `30` could mean seconds or days, so it is refused.
 *
 * @returns the milliseconds, or a problem description (for a Setting's parse)
 */
export function parseDuration(text: string): { value: number } | { problem: string } {
  const t = text.trim().toLowerCase();
  if (!DURATION.test(t)) return { problem: `${JSON.stringify(text)} is not ${ACCEPTS}` };
  let ms = 0;
  for (const [, amount, unit] of t.matchAll(PART)) ms += Number(amount) * UNIT_MS[unit!]!;
  ms = Math.round(ms);
  if (!Number.isSafeInteger(ms)) return { problem: `${JSON.stringify(text)} is too long` };
  return { value: ms };
}

/** Milliseconds as the shortest exact text `parseDuration` reads back (`7d`, `1h30m`, `0s`). */
export function formatDuration(ms: number): string {
  if (ms === 0) return '0s';
  let rest = ms;
  let out = '';
  for (const unit of ['d', 'h', 'm', 's', 'ms'] as const) {
    const size = UNIT_MS[unit]!;
    const n = Math.floor(rest / size);
    if (n > 0) {
      out += `${n}${unit}`;
      rest -= n * size;
    }
  }
  return out;
}

// Full ISO 8601 date-time (or a date alone); the offset is optional, without one the
// time is read as UTC rather than the machine's local zone, so a command means the same
// on every host.
const ISO = /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|[+-]\d{2}:?\d{2})?)?$/i;

/**
 * A point in time: an ISO 8601 timestamp (`2024-05-01T12:00:00Z`, `2024-05-01`; no offset
 * means UTC) or a duration before `now` (`2h` = two hours ago).
 *
 * @returns the instant, or a problem description
 */
export function parseTimePoint(text: string, now: Date): { value: Date } | { problem: string } {
  const t = text.trim();
  const duration = parseDuration(t);
  if ('value' in duration) return { value: new Date(now.getTime() - duration.value) };
  const m = ISO.exec(t);
  if (m) {
    const [, y, mo, d, h = '00', mi = '00', s = '00', frac = '', zone] = m;
    const iso = `${y}-${mo}-${d}T${h}:${mi}:${s}${frac ? `.${frac.slice(0, 3).padEnd(3, '0')}` : ''}${normaliseZone(zone)}`;
    const date = new Date(iso);
    // Date accepts 2024-02-31 and rolls it over; refuse what does not read back the same.
    if (!Number.isNaN(date.getTime()) && sameCalendarDay(date, y!, mo!, d!, zone)) return { value: date };
  }
  return {
    problem: `${JSON.stringify(text)} is neither an ISO 8601 time (2024-05-01T12:00:00Z) nor a duration ago (45s, 30m, 12h, 7d)`,
  };
}

function normaliseZone(zone: string | undefined): string {
  if (!zone || zone.toUpperCase() === 'Z') return 'Z';
  return zone.includes(':') ? zone : `${zone.slice(0, 3)}:${zone.slice(3)}`;
}

function sameCalendarDay(date: Date, y: string, mo: string, d: string, zone: string | undefined): boolean {
  // Check the calendar fields in the zone they were written in.
  const offsetMin = zoneMinutes(zone);
  const local = new Date(date.getTime() + offsetMin * 60_000);
  return local.getUTCFullYear() === Number(y) && local.getUTCMonth() + 1 === Number(mo) && local.getUTCDate() === Number(d);
}

function zoneMinutes(zone: string | undefined): number {
  if (!zone || zone.toUpperCase() === 'Z') return 0;
  const z = zone.replace(':', '');
  const sign = z.startsWith('-') ? -1 : 1;
  return sign * (Number(z.slice(1, 3)) * 60 + Number(z.slice(3, 5)));
}
