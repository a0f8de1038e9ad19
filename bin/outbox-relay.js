#!/usr/bin/env node
// Installed entry point: runs the compiled CLI. The published package carries dist/ (built
// by `prepack`, so installing it runs no script); a checkout has it after `npm run build`.
import { existsSync } from 'node:fs';

const cli = new URL('../dist/cli.js', import.meta.url);
if (!existsSync(cli)) {
  process.stderr.write(`outbox-relay: ${cli.pathname} is missing: this is a checkout, not the published package; run \`npm run build\` first\n`);
  process.exit(1);
}
await import(cli.href);
