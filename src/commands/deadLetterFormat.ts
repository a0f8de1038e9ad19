import type { DeadLetter } from './deadLetterSelection.js';

// How `outbox-relay dead-letters list` prints dead letters: a table or JSON.

/** A dead letter as JSON: binary payloads as base64, times as ISO text. */
export function deadLetterJson(d: DeadLetter): Record<string, unknown> {
  return { ...d, payloadBytes: d.payloadBytes ? d.payloadBytes.toString('base64') : null };
}

/** Dead letters as a table for a terminal; `*` marks the dead letter a key is parked behind. */
export function formatDeadLetters(list: readonly DeadLetter[], total = list.length): string {
  if (list.length === 0) return 'no dead letters match\n';
  const rows = [
    ['id', 'dead-lettered', 'topic', 'key', 'policy', 'attempts', 'error', 'reason'],
    ...list.map((d) => [
      String(d.id),
      d.deadLetteredAt.toISOString().replace(/\.\d+Z$/, 'Z'),
      d.topic,
      d.key,
      d.policy + (d.parksKey ? '*' : ''),
      String(d.attempts),
      d.errorName,
      oneLine(d.reason, 80),
    ]),
  ];
  const widths = rows[0]!.map((_, c) => Math.max(...rows.map((r) => r[c]!.length)));
  const lines = rows.map((r) => r.map((cell, c) => cell.padEnd(widths[c]!)).join('  ').trimEnd());
  if (list.some((d) => d.parksKey)) lines.push('(* its key is parked: later rows of the key wait for it)');
  if (total > list.length) lines.push(`(${list.length} of ${total} shown; raise --limit or narrow the filter)`);
  return lines.join('\n') + '\n';
}

function oneLine(text: string, max: number): string {
  const t = text.replace(/\s+/g, ' ').trim();
  return t.length > max ? `${t.slice(0, max - 1)}…` : t;
}
