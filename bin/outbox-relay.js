#!/usr/bin/env node
// Installed entry point: runs the compiled CLI (npm run build, or `prepare` on npm ci).
import '../dist/cli.js';
