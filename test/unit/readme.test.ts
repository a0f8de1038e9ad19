import { test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { RUN_SETTINGS } from '../../src/commands/run.js';
import { readSetting, type Setting } from '../../src/shared/settings.js';
import { TENANT_SETTINGS } from '../../src/tenants/settings.js';

const readme = readFileSync(new URL('../../README.md', import.meta.url), 'utf8');
const configuration = readFileSync(new URL('../../docs/configuration.md', import.meta.url), 'utf8');

/** The rows of docs/configuration.md's settings table (flag | environment | default | meaning). */
function settingRows(text = configuration): Array<{ line: string; flag: string; envs: string[]; defaultCell: string }> {
  return text
    .split('\n')
    .filter((l) => l.startsWith('| ') && !l.startsWith('| flag') && /^\| (—|`--)/.test(l))
    .map((line) => {
      const cells = line.split(' | ').map((c) => c.replace(/^\| |\|$/g, '').trim());
      return { line, flag: cells[0]!, envs: [...cells[1]!.matchAll(/`([A-Z0-9_]+)`/g)].map((m) => m[1]!), defaultCell: cells[2]! };
    });
}

test('the settings table (docs/configuration.md) lists every setting of `outbox-relay run`, with its flag and variable', () => {
  const rows = settingRows();
  for (const s of RUN_SETTINGS) {
    const row = rows.find((r) => r.envs.includes(s.env));
    assert.ok(row, `docs/configuration.md has a row for ${s.env}`);
    if (s.flag) assert.equal(row.flag, `\`${s.flag}\``, `${s.env}'s row names ${s.flag}`);
    else assert.equal(row.flag, '—', `${s.env} has no flag (a secret) and the table says so`);
  }
});

test('every row of the settings table is a setting of `outbox-relay run` whose default is the one the table gives', () => {
  const rows = settingRows();
  assert.ok(rows.length >= RUN_SETTINGS.length, `the table has ${rows.length} rows`);
  const problems: string[] = [];
  for (const row of rows) {
    const env = row.envs.find((e) => RUN_SETTINGS.some((s) => s.env === e));
    const setting = RUN_SETTINGS.find((s) => s.env === env) as Setting<unknown> | undefined;
    if (!setting) {
      problems.push(`${row.line}: names no variable of \`outbox-relay run\``);
      continue;
    }
    if (setting.flag ? row.flag !== `\`${setting.flag}\`` : row.flag !== '—') problems.push(`${setting.env}: the table's flag ${row.flag} is not ${setting.flag ?? '— (a secret)'}`);
    for (const other of row.envs.filter((e) => e !== setting.env)) {
      if (other !== `${setting.env}_FILE` || !setting.secret) problems.push(`${setting.env}: the row also names ${other}, which is not its secret file variable`);
    }
    const cell = row.defaultCell.replace(/`/g, '');
    const actual = readSetting(setting, undefined, {});
    if (['required', '—', 'system CAs'].includes(cell)) {
      // Not set: no value, '' (text settings) or an empty map (per-topic overrides).
      const unset = actual === undefined || actual === '' || (typeof actual === 'object' && actual !== null && Object.keys(actual).length === 0);
      if (!unset) problems.push(`${setting.env}: the table gives no default (${cell}), the setting's is ${JSON.stringify(actual)}`);
      continue;
    }
    // The documented default, read as if the user had set it, is what the relay takes unset.
    let documented: unknown;
    try {
      documented = readSetting(setting, undefined, { [setting.env]: cell });
    } catch (error) {
      problems.push(`${setting.env}: the table's default ${cell} is not a value it accepts (${(error as Error).message})`);
      continue;
    }
    if (JSON.stringify(documented) !== JSON.stringify(actual)) problems.push(`${setting.env}: the table's default is ${cell}, the setting's is ${JSON.stringify(actual)}`);
  }
  assert.deepEqual(problems, []);
});

test('the README has exactly the two newcomer commands: the demo and npm test', () => {
  const block = /## Try it[\s\S]*?```sh\n([\s\S]*?)```/.exec(readme)?.[1] ?? '';
  const commands = block.split('\n').filter((l) => l.trim() !== '').map((l) => l.replace(/\s+#.*$/, ''));
  assert.deepEqual(commands, ['npm ci && npm run demo', 'npm ci && npm test']);
});

test('the README stays a front door: at most 350 lines', () => {
  const lines = readme.split('\n').length;
  assert.ok(lines <= 350, `README.md has ${lines} lines`);
});

test('docs/tenants.md lists every tenant setting of `outbox-relay run` with its flag, variable and default, and no other', () => {
  const rows = settingRows(readFileSync(new URL('../../docs/tenants.md', import.meta.url), 'utf8'));
  assert.deepEqual(rows.map((r) => r.envs[0]), TENANT_SETTINGS.map((s) => s.env));
  for (const s of TENANT_SETTINGS as readonly Setting<unknown>[]) {
    const row = rows.find((r) => r.envs.includes(s.env))!;
    assert.equal(row.flag, `\`${s.flag}\``);
    const cell = row.defaultCell.replace(/`/g, '');
    const actual = readSetting(s, undefined, {});
    if (cell === '—') assert.equal(actual, '', `${s.env}: the table gives no default`);
    else assert.deepEqual(readSetting(s, undefined, { [s.env]: cell }), actual, `${s.env}: the table's default ${cell}`);
  }
});
