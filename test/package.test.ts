// The package as a user gets it: `npm pack`, then `npm install <tarball>` into a fresh app
// with the npm on this machine. Installing must run no script (npm 11 warns about install
// scripts not covered by allowScripts; dist/ is built by `prepack`, before packing), both
// entry points must import, and the bin must run.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const run = promisify(execFile);
// What npm runs when a package is installed (prepare: for a local or git install).
const INSTALL_SCRIPTS = ['preinstall', 'install', 'postinstall', 'prepare'];

async function npm(args: string[], cwd: string): Promise<string> {
  const { stdout, stderr } = await run('npm', args, { cwd, maxBuffer: 64 << 20, env: { ...process.env, npm_config_update_notifier: 'false' } });
  return `${stdout}\n${stderr}`;
}

test('package: the packed tarball installs into a fresh app with no install script, imports outbox-relay, outbox-relay/cache and outbox-relay/effects, and runs outbox-relay --help', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'outbox-relay-pack-'));
  try {
    const packed = JSON.parse(await run('npm', ['pack', '--json', '--pack-destination', dir], { cwd: ROOT, maxBuffer: 64 << 20 }).then((r) => r.stdout)) as Array<{
      filename: string;
      files: Array<{ path: string }>;
    }>;
    const files = new Set(packed[0]!.files.map((f) => f.path));
    for (const f of ['bin/outbox-relay.js', 'dist/index.js', 'dist/index.d.ts', 'dist/cache/index.js', 'dist/cache/index.d.ts', 'dist/effects/index.js', 'dist/effects/index.d.ts', 'dist/cli.js', 'sql/001_outbox.sql', 'sql/009_effect_keys.sql']) {
      assert.ok(files.has(f), `the tarball has ${f}`);
    }
    assert.ok(![...files].some((f) => f.startsWith('src/') || f.startsWith('test/')), 'no sources or tests in the tarball');

    const app = join(dir, 'app');
    mkdirSync(app);
    writeFileSync(join(app, 'package.json'), JSON.stringify({ name: 'app', version: '1.0.0', private: true, type: 'module' }));
    const installed = await npm(['install', '--no-audit', '--no-fund', '--prefer-offline', '--foreground-scripts', join(dir, packed[0]!.filename)], app);
    const manifest = JSON.parse(readFileSync(join(app, 'node_modules/outbox-relay/package.json'), 'utf8')) as { scripts?: Record<string, string> };
    const scripts = INSTALL_SCRIPTS.filter((s) => manifest.scripts?.[s]);
    assert.deepEqual(scripts, [], `the published package has install scripts: ${scripts.map((s) => `${s}: ${manifest.scripts![s]}`).join(', ')}`);
    // --foreground-scripts prints every script npm runs ("> outbox-relay@0.1.0 prepare").
    assert.doesNotMatch(installed, /> outbox-relay@|install-scripts|allowScripts/, installed);

    const imported = await run(
      process.execPath,
      ['--input-type=module', '-e', "const a = await import('outbox-relay'); const c = await import('outbox-relay/cache'); const e = await import('outbox-relay/effects'); console.log(typeof a.createRelay, typeof a.enqueue, typeof c.createCache, typeof e.createEffectGuard)"],
      { cwd: app },
    );
    assert.equal(imported.stdout.trim(), 'function function function function');
    const help = await run(join(app, 'node_modules/.bin/outbox-relay'), ['--help'], { cwd: app });
    assert.match(help.stdout, /^Usage: outbox-relay /m);
    assert.match(help.stdout, /^ {2}run\b/m);
    assert.match(help.stdout, /^ {2}migrate\b/m);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('package: the bin in a checkout without dist/ says to build, instead of a module-not-found trace', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'outbox-relay-bin-'));
  try {
    mkdirSync(join(dir, 'bin'));
    copyFileSync(join(ROOT, 'bin/outbox-relay.js'), join(dir, 'bin/outbox-relay.js'));
    writeFileSync(join(dir, 'package.json'), JSON.stringify({ type: 'module' }));
    const failed = await run(process.execPath, [join(dir, 'bin/outbox-relay.js'), '--help']).then(
      () => assert.fail('the bin ran without dist/'),
      (e: { code: number; stderr: string }) => e,
    );
    assert.equal(failed.code, 1);
    assert.equal(failed.stderr, `outbox-relay: ${join(dir, 'dist/cli.js')} is missing: this is a checkout, not the published package; run \`npm run build\` first\n`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
