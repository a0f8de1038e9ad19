// Every code block of README.md and docs/*.md is checked as a user would meet it.
// TypeScript and JavaScript blocks are type-checked against the package's public entry
// points: `outbox-relay`, `outbox-relay/cache` and `outbox-relay/effects`, mapped to
// src/index.ts, src/cache/index.ts and src/effects/index.ts (what package.json's exports
// map publishes), and nothing deeper. JSON
// blocks must parse. In shell blocks, every `outbox-relay <command> --flag` shown must be a
// command and a flag of that command's --help.
//
// A block that cannot stand alone says so just before it, in an HTML comment (invisible
// once rendered):
//   <!-- compile: fragment: <why> -->              not compiled; the reason is required
//   <!-- compile: declare const client: pg.PoolClient; -->  compiled after these lines
// The prelude may declare what the prose around the block assumes (`client`,
// `databaseUrl`: `declare const client: import('pg').PoolClient;`) or import what an
// earlier block of the page imported.
// There is no silent exclusion: the test counts what it checked and fails below a minimum.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import ts from 'typescript-api';
import { cliBundle } from './helpers/processes.js';

const ROOT = resolve(fileURLToPath(new URL('..', import.meta.url)));
const DOCS = ['README.md', ...readdirSync(join(ROOT, 'docs')).filter((f) => f.endsWith('.md')).sort().map((f) => `docs/${f}`)];

// What the harness must have found, so that a broken extraction cannot pass by checking
// nothing. Raise them when blocks are added.
const MIN_COMPILED_BLOCKS = 14;
const MIN_CLI_INVOCATIONS = 23;

const CODE = new Set(['ts', 'typescript', 'js', 'javascript']);
const SHELL = new Set(['sh', 'bash', 'shell', 'console']);
const MARKER = /^<!--\s*compile:\s*(.*?)\s*-->$/;

interface Block {
  file: string;
  /** Line of the opening fence (1-based). */
  fence: number;
  lang: string;
  code: string;
  /** The marker's text, when the line before the block is one. */
  marker: string | undefined;
  markerLine: number;
}

function blocksOf(file: string): Block[] {
  const lines = readFileSync(join(ROOT, file), 'utf8').split('\n');
  const blocks: Block[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)```\s*([\w-]*)/.exec(lines[i]!);
    if (!open) continue;
    const indent = open[1]!.length;
    let end = i + 1;
    while (end < lines.length && !/^\s*```\s*$/.test(lines[end]!)) end++;
    assert.ok(end < lines.length, `${file}:${i + 1}: a code block that is never closed`);
    let before = i - 1;
    while (before >= 0 && lines[before]!.trim() === '') before--;
    const marker = before >= 0 ? MARKER.exec(lines[before]!.trim())?.[1] : undefined;
    blocks.push({
      file,
      fence: i + 1,
      lang: open[2]!.toLowerCase(),
      code: lines
        .slice(i + 1, end)
        .map((l) => l.slice(Math.min(indent, l.length - l.trimStart().length)))
        .join('\n'),
      marker,
      markerLine: before + 1,
    });
    i = end;
  }
  return blocks;
}

const ALL = DOCS.flatMap(blocksOf);

const FRAGMENT = /^fragment:\s*(.*)$/;

/** The blocks the type check compiles (all TS/JS blocks but the marked fragments). */
function codeBlocks(): Block[] {
  return ALL.filter((b) => CODE.has(b.lang) && !FRAGMENT.test(b.marker ?? ''));
}

function typeCheck(blocks: Block[]): { problems: string[]; resolved: Map<string, string | undefined> } {
  const config = ts.readConfigFile(join(ROOT, 'tsconfig.json'), (p) => ts.sys.readFile(p));
  const parsed = ts.parseJsonConfigFileContent(config.config, ts.sys, ROOT);
  const options: ts.CompilerOptions = {
    ...parsed.options,
    noEmit: true,
    // Unused imports and locals are normal in an example.
    noUnusedLocals: false,
    noUnusedParameters: false,
    // Not part of `strict`: what a user's strict project sees.
    noUncheckedIndexedAccess: false,
    paths: { 'outbox-relay': [join(ROOT, 'src/index.ts')], 'outbox-relay/cache': [join(ROOT, 'src/cache/index.ts')], 'outbox-relay/effects': [join(ROOT, 'src/effects/index.ts')] },
  };
  // Virtual files at the repository's root: module resolution finds node_modules and the
  // package.json ("type": "module": top-level await is allowed, as in an ESM app).
  const sources = new Map<string, { block: Block; text: string }>();
  for (const block of blocks) {
    const prelude = block.marker ? `${block.marker}` : '';
    // Line 1: the prelude; the block's first line is line 2.
    const text = `${prelude}\n${block.code}\nexport {};\n`;
    sources.set(join(ROOT, `__doc_block__${block.file.replace(/\W/g, '_')}_${block.fence}.ts`), { block, text });
  }
  const host = ts.createCompilerHost(options);
  const getSourceFile = host.getSourceFile.bind(host);
  host.getSourceFile = (name, languageVersion, ...rest) => {
    const virtual = sources.get(name);
    return virtual ? ts.createSourceFile(name, virtual.text, languageVersion, true) : getSourceFile(name, languageVersion, ...rest);
  };
  const fileExists = host.fileExists.bind(host);
  host.fileExists = (name) => sources.has(name) || fileExists(name);
  const readFile = host.readFile.bind(host);
  host.readFile = (name) => sources.get(name)?.text ?? readFile(name);
  const program = ts.createProgram([...sources.keys()], options, host);

  const problems: string[] = [];
  for (const [name, { block }] of sources) {
    const sourceFile = program.getSourceFile(name)!;
    for (const d of [...program.getSyntacticDiagnostics(sourceFile), ...program.getSemanticDiagnostics(sourceFile)]) {
      const { line } = sourceFile.getLineAndCharacterOfPosition(d.start ?? 0);
      const where = line === 0 ? `${block.file}:${block.markerLine} (its compile marker)` : `${block.file}:${block.fence + line}`;
      problems.push(`${where}: TS${d.code} ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`);
    }
  }
  const resolved = new Map<string, string | undefined>();
  for (const specifier of ['outbox-relay', 'outbox-relay/cache', 'outbox-relay/effects', 'outbox-relay/dist/relay/relay.js']) {
    resolved.set(specifier, ts.resolveModuleName(specifier, join(ROOT, '__probe__.ts'), options, host).resolvedModule?.resolvedFileName);
  }
  return { problems, resolved };
}

test('docs: every fragment marker gives its reason and stands before a code block', () => {
  const markers = DOCS.flatMap((file) =>
    readFileSync(join(ROOT, file), 'utf8')
      .split('\n')
      .flatMap((l, i) => (MARKER.test(l.trim()) ? [{ file, line: i + 1, text: MARKER.exec(l.trim())![1]! }] : [])),
  );
  for (const m of markers) {
    const block = ALL.find((b) => b.file === m.file && b.markerLine === m.line);
    assert.ok(block, `${m.file}:${m.line}: a compile marker that is not right before a code block`);
    assert.ok(CODE.has(block.lang), `${m.file}:${m.line}: a compile marker before a ${block.lang || 'plain'} block (only ts/js blocks are compiled)`);
    const fragment = FRAGMENT.exec(m.text);
    if (fragment) assert.ok(fragment[1]!.length >= 10, `${m.file}:${m.line}: a fragment marker must say why the block cannot compile`);
  }
});

test('docs: every TypeScript and JavaScript block of README.md and docs/ compiles against the public entry points (outbox-relay, outbox-relay/cache, outbox-relay/effects)', () => {
  const blocks = codeBlocks();
  const { problems, resolved } = typeCheck(blocks);
  // The harness checks itself: the entry points are the sources a user's import reaches...
  assert.equal(resolved.get('outbox-relay'), join(ROOT, 'src/index.ts'));
  assert.equal(resolved.get('outbox-relay/cache'), join(ROOT, 'src/cache/index.ts'));
  assert.equal(resolved.get('outbox-relay/effects'), join(ROOT, 'src/effects/index.ts'));
  // ...and only those: a path into the package is not public (package.json's exports).
  assert.notEqual(resolved.get('outbox-relay/dist/relay/relay.js'), join(ROOT, 'src/relay/relay.ts'));
  assert.ok(blocks.length >= MIN_COMPILED_BLOCKS, `compiled ${blocks.length} blocks, expected at least ${MIN_COMPILED_BLOCKS}: is the extraction broken?`);
  assert.deepEqual(problems, [], `code blocks that do not compile:\n${problems.join('\n')}`);
});

test('docs: a block with an error fails the check, naming its file and line (positive control)', () => {
  const broken: Block = { file: 'docs/example.md', fence: 40, lang: 'ts', code: "import { createRelayy } from 'outbox-relay';\nconst n: number = 'x';", marker: undefined, markerLine: 0 };
  const fine: Block = { file: 'docs/example.md', fence: 50, lang: 'ts', code: "import { createCache } from 'outbox-relay/cache';\nvoid createCache;", marker: undefined, markerLine: 0 };
  const { problems } = typeCheck([broken, fine]);
  assert.equal(problems.length, 2, problems.join('\n'));
  assert.match(problems[0]!, /^docs\/example\.md:41: TS(2305|2724) .*createRelayy/);
  assert.match(problems[1]!, /^docs\/example\.md:42: TS2322 /);
});

test('docs: every JSON block parses', () => {
  const json = ALL.filter((b) => b.lang === 'json');
  assert.ok(json.length >= 1, 'no JSON block found');
  for (const b of json) assert.doesNotThrow(() => JSON.parse(b.code), `${b.file}:${b.fence}: a JSON block that does not parse`);
});

interface Invocation {
  where: string;
  command: string[];
  flags: string[];
}

/** `outbox-relay <command...> [args] --flag ...` in shell blocks; continuation lines joined, comments dropped. */
function invocations(blocks: Block[] = ALL): Invocation[] {
  const found: Invocation[] = [];
  for (const b of blocks.filter((x) => SHELL.has(x.lang))) {
    const lines = b.code.split('\n');
    for (let i = 0; i < lines.length; i++) {
      const start = i;
      let line = lines[i]!;
      while (line.trimEnd().endsWith('\\') && i + 1 < lines.length) line = line.trimEnd().slice(0, -1) + ' ' + lines[++i]!;
      const code = line.replace(/(^|\s)#.*$/, '');
      for (const segment of code.split(/\|\||&&|[|;]/)) {
        const tokens = segment.trim().split(/\s+/);
        const at = tokens.findIndex((t) => t === 'outbox-relay' || t.endsWith('/outbox-relay') || t === 'bin/outbox-relay.js');
        if (at < 0) continue;
        const rest = tokens.slice(at + 1);
        const command: string[] = [];
        for (const t of rest) {
          if (t.startsWith('-') || !/^[a-z][a-z-]*$/.test(t) || command.length === 2) break;
          command.push(t);
        }
        const flags = rest.filter((t) => t.startsWith('--')).map((t) => t.split('=')[0]!);
        found.push({ where: `${b.file}:${b.fence + 1 + start}`, command, flags });
      }
    }
  }
  return found;
}

const execFileAsync = promisify(execFile);

/** Each help text once per file: three tests read the same ones, and a CLI start costs CPU. */
const helpTexts = new Map<string, Promise<string>>();
function help(command: string[]): Promise<string> {
  const key = command.join(' ');
  let text = helpTexts.get(key);
  if (!text) {
    text = execFileAsync(process.execPath, [cliBundle(), ...command, '--help'], { cwd: ROOT, env: { PATH: process.env.PATH, HOME: process.env.HOME } }).then((r) => r.stdout);
    helpTexts.set(key, text);
  }
  return text;
}

/** The invocations whose command or flags the CLI does not have, one line each. */
async function cliProblems(calls: Invocation[]): Promise<string[]> {
  const top = await help([]);
  const commands = new Set([...top.matchAll(/^ {2}([a-z][a-z-]*)\b/gm)].map((m) => m[1]!));
  assert.ok(commands.has('run') && commands.has('migrate'), `the top-level help lists no commands:\n${top}`);
  // Commands with subcommands (dead-letters list, debezium attach) are named by two words.
  const helps = new Map<string, Promise<string>>();
  const problems: string[] = [];
  for (const call of calls) {
    const [first, second] = call.command;
    if (!first && call.flags.length > 0) {
      // `outbox-relay --help`: the top-level options.
      for (const flag of call.flags) if (!new RegExp(`(^|[\\s,])${flag.replace(/[-]/g, '\\-')}(\\s|,|$)`, 'm').test(top)) problems.push(`${call.where}: \`outbox-relay\` has no option ${flag}`);
      continue;
    }
    if (!first || !commands.has(first)) {
      problems.push(`${call.where}: \`outbox-relay ${call.command.join(' ')}\` is not a command (${[...commands].join(', ')})`);
      continue;
    }
    if (!helps.has(first)) helps.set(first, help([first]));
    const parent = await helps.get(first)!;
    const subcommands = new Set([...parent.replace(/^[\s\S]*?\nCommands:\n/, '').matchAll(/^ {2}([a-z][a-z-]*)\b/gm)].map((m) => m[1]!));
    const path = /\nCommands:\n/.test(parent) && second && subcommands.has(second) ? [first, second] : [first];
    if (/\nCommands:\n/.test(parent) && path.length === 1 && !parent.includes('\nOptions:\n  --')) {
      problems.push(`${call.where}: \`outbox-relay ${first}\` needs one of ${[...subcommands].join(', ')}`);
      continue;
    }
    const key = path.join(' ');
    if (!helps.has(key)) helps.set(key, help(path));
    const text = await helps.get(key)!;
    for (const flag of call.flags) {
      if (!new RegExp(`(^|[\\s,])${flag.replace(/[-]/g, '\\-')}(\\s|,|$|\\[|<|=)`, 'm').test(text)) problems.push(`${call.where}: \`outbox-relay ${key}\` has no option ${flag}`);
    }
  }
  return problems;
}

test("docs: every `outbox-relay <command> --flag` in a shell block is a command and a flag of the CLI's --help", async () => {
  const calls = invocations();
  assert.ok(calls.length >= MIN_CLI_INVOCATIONS, `found ${calls.length} outbox-relay command lines, expected at least ${MIN_CLI_INVOCATIONS}: is the extraction broken?`);
  const problems = await cliProblems(calls);
  assert.deepEqual(problems, [], problems.join('\n'));
});

test('docs: a shell line with an unknown command or flag fails the check, naming its file and line (positive control)', async () => {
  const block: Block = {
    file: 'docs/example.md',
    fence: 10,
    lang: 'sh',
    code: ['outbox-relay cleanup --retention 12h --bogus-flag 3   # one unknown flag', 'DATABASE_URL=x outbox-relay dead-letters replay --all \\', '  --rate 10 --nope', 'outbox-relay nosuch --x', 'outbox-relay --help --bogus'].join('\n'),
    marker: undefined,
    markerLine: 0,
  };
  const calls = invocations([block]);
  assert.deepEqual(calls.map((c) => [c.where, c.command.join(' '), c.flags.join(' ')]), [
    ['docs/example.md:11', 'cleanup', '--retention --bogus-flag'],
    ['docs/example.md:12', 'dead-letters replay', '--all --rate --nope'],
    ['docs/example.md:14', 'nosuch', '--x'],
    ['docs/example.md:15', '', '--help --bogus'],
  ]);
  const problems = await cliProblems(calls);
  assert.equal(problems.length, 4, problems.join('\n'));
  assert.match(problems[0]!, /^docs\/example\.md:11: `outbox-relay cleanup` has no option --bogus-flag$/);
  assert.match(problems[1]!, /^docs\/example\.md:12: `outbox-relay dead-letters replay` has no option --nope$/);
  assert.match(problems[2]!, /^docs\/example\.md:14: `outbox-relay nosuch` is not a command/);
  assert.match(problems[3]!, /^docs\/example\.md:15: `outbox-relay` has no option --bogus$/);
});

/** GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens. */
function slug(heading: string): string {
  return heading.trim().toLowerCase().replace(/[^\p{L}\p{N}_\- ]/gu, '').replace(/ /g, '-');
}

/** Relative links of the pages whose file or heading does not exist, one line each. */
function brokenLinks(pages: Map<string, string>, exists: (path: string) => boolean): string[] {
  const anchors = new Map([...pages].map(([file, text]) => [file, new Set([...text.replace(/```[\s\S]*?```/g, '').matchAll(/^#+ (.*)$/gm)].map((m) => slug(m[1]!)))]));
  const problems: string[] = [];
  for (const [file, text] of pages) {
    for (const m of text.matchAll(/\]\(([^)\s]+)\)/g)) {
      const link = m[1]!;
      if (/^[a-z]+:/.test(link)) continue;
      const [path, anchor] = link.split('#') as [string, string | undefined];
      const target = path === '' ? file : join(file, '..', path).replace(/^\.\//, '');
      if (!exists(target)) problems.push(`${file}: ${link}: no such file`);
      else if (anchor && target.endsWith('.md') && !anchors.get(target)?.has(anchor)) problems.push(`${file}: ${link}: no such heading in ${target}`);
    }
  }
  return problems;
}

test('docs: every relative link of README.md and docs/ reaches a file, and a heading where it names one', () => {
  const pages = new Map(DOCS.map((f) => [f, readFileSync(join(ROOT, f), 'utf8')]));
  const links = [...pages.values()].reduce((n, t) => n + [...t.matchAll(/\]\((?![a-z]+:)[^)\s]+\)/g)].length, 0);
  assert.ok(links >= 50, `found ${links} relative links: is the extraction broken?`);
  assert.deepEqual(brokenLinks(pages, (p) => existsSync(join(ROOT, p))), []);
});

test('docs: a link to a missing file or heading fails the check (positive control)', () => {
  const pages = new Map([
    ['README.md', '# Top\n\n## Try it\n\n[a](docs/a.md#the-part) [b](docs/b.md) [c](#try-it) [d](#nowhere)\n'],
    ['docs/a.md', '# A\n\n## The part\n\n[back](../README.md#try-it) [gone](../README.md#gone)\n'],
  ]);
  assert.deepEqual(brokenLinks(pages, (p) => pages.has(p)), [
    'README.md: docs/b.md: no such file',
    'README.md: #nowhere: no such heading in README.md',
    'docs/a.md: ../README.md#gone: no such heading in README.md',
  ]);
});

// Flags of other programs the docs show: Node's, npm's and Kafka's own command-line tools.
const FOREIGN_FLAGS = new Set(['--import', '--cpu-prof', '--max-old-space-size', '--max-semi-space-size', '--global', '--add-config', '--add-scram', '--alter', '--entity-name', '--entity-type', '--to-earliest']);

/** Every `--flag` the pages show in inline code, with where (shell blocks: the invocation check above). */
function documentedFlags(pages: Map<string, string>): Array<{ where: string; flag: string }> {
  const found: Array<{ where: string; flag: string }> = [];
  for (const [file, text] of pages) {
    const lines = text.split('\n');
    lines.forEach((line, i) => {
      for (const code of line.matchAll(/`([^`]+)`/g)) {
        for (const m of code[1]!.matchAll(/(?:^|[\s[(=])(--[a-z][a-z0-9]*(?:-[a-z0-9]+)*)\b(?!-)/g)) found.push({ where: `${file}:${i + 1}`, flag: m[1]! });
      }
    });
  }
  return found;
}

test('docs: every --flag shown in README.md and docs/ exists: a flag of an outbox-relay command, of a program of this repository (bench, fault suite, scripts), or of Node, npm or Kafka\'s tools', async () => {
  const pages = new Map(DOCS.map((f) => [f, readFileSync(join(ROOT, f), 'utf8')]));
  // Every command's help, subcommands included.
  const top = await help([]);
  const commands = [...top.matchAll(/^ {2}([a-z][a-z-]*)\b/gm)].map((m) => m[1]!).filter((c) => c !== 'help');
  const texts = [top];
  for (const c of commands) {
    const text = await help([c]);
    texts.push(text);
    const subs = /\nCommands:\n/.test(text) ? [...text.replace(/^[\s\S]*?\nCommands:\n/, '').matchAll(/^ {2}([a-z][a-z-]*)\b/gm)].map((m) => m[1]!).filter((s) => s !== 'help') : [];
    for (const s of subs) texts.push(await help([c, s]));
  }
  const cliFlags = new Set(texts.flatMap((t) => [...t.matchAll(/(?:^|[\s,])(--[a-z][a-z0-9-]*)/gm)].map((m) => m[1]!)));
  assert.ok(cliFlags.has('--batch-size') && cliFlags.has('--rate') && cliFlags.has('--table'), 'the helps of run, dead-letters replay and debezium attach were read');
  const own = ['bench', 'test/faults', 'scripts'].flatMap((dir) =>
    readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' }).filter((f) => f.endsWith('.ts')).map((f) => readFileSync(join(ROOT, dir, f), 'utf8')),
  ).join('\n');
  const flags = documentedFlags(pages);
  assert.ok(flags.length >= 100, `found ${flags.length} flags: is the extraction broken?`);
  const unknown = flags.filter(({ flag }) => !cliFlags.has(flag) && !FOREIGN_FLAGS.has(flag) && !new RegExp(`['"\`]${flag}['"\`=\\s]`).test(own));
  assert.deepEqual(unknown.map((u) => `${u.where}: ${u.flag}`), []);
});

test('docs: a flag no program has is found, with its line (positive control)', () => {
  const flags = documentedFlags(new Map([['docs/x.md', 'Run `outbox-relay run --batch-size 5 --bogus-flag`.\nOr `--metrics-*` and [`--rate`](#r).']]));
  assert.deepEqual(flags, [
    { where: 'docs/x.md:1', flag: '--batch-size' },
    { where: 'docs/x.md:1', flag: '--bogus-flag' },
    { where: 'docs/x.md:2', flag: '--rate' },
  ]);
});

/** Environment variables the pages name in inline code that no source of the repository names. */
function unknownVariables(pages: Map<string, string>, known: Set<string>): string[] {
  const problems: string[] = [];
  for (const [file, text] of pages) {
    text.split('\n').forEach((line, i) => {
      for (const code of line.matchAll(/`([^`]+)`/g)) {
        for (const m of code[1]!.matchAll(/\b((?:OUTBOX|KAFKA|DATABASE|PG|REDIS|TEST|HOSTILE|PROMTOOL)_[A-Z0-9_]*[A-Z0-9])\b/g)) {
          const name = m[1]!;
          const base = name.replace(/_FILE$/, '');
          // A per-outbox variable of the examples' outboxes (OUTBOX_<NAME>_SCHEMA): its setting's own name.
          const perOutbox = /^OUTBOX_(?:TENANT_A|ORDERS|BILLING)_(.+)$/.exec(base)?.[1];
          if (known.has(name) || known.has(base) || (perOutbox && (known.has(perOutbox) || known.has(`OUTBOX_${perOutbox}`)))) continue;
          problems.push(`${file}:${i + 1}: ${name}`);
        }
      }
    });
  }
  return problems;
}

test('docs: every environment variable README.md and docs/ name is one the code reads or sets (src, tests, scripts, bench, CI, deploy)', () => {
  const pages = new Map(DOCS.map((f) => [f, readFileSync(join(ROOT, f), 'utf8')]));
  const sources = ['src', 'test', 'scripts', 'bench', 'deploy', 'examples', '.ci'].flatMap((dir) =>
    readdirSync(join(ROOT, dir), { recursive: true, encoding: 'utf8' })
      .map((f) => join(ROOT, dir, f))
      .filter((f) => /\.(ts|mjs|sh|ya?ml)$|\/run$|Dockerfile$/.test(f) && !f.endsWith('docs.test.ts'))
      .map((f) => readFileSync(f, 'utf8')),
  );
  const known = new Set(sources.flatMap((t) => [...t.matchAll(/\b[A-Z][A-Z0-9_]{2,}\b/g)].map((m) => m[0])));
  assert.ok(known.has('OUTBOX_BATCH_SIZE') && known.has('KAFKA_BROKERS'), 'the sources were read');
  assert.deepEqual(unknownVariables(pages, known), []);
});

test('docs: a variable no code names is found, with its line (positive control)', () => {
  const known = new Set(['OUTBOX_SCHEMA', 'DATABASE_URL']);
  const pages = new Map([['docs/x.md', 'Set `OUTBOX_SCHEMA`, `DATABASE_URL_FILE` and `OUTBOX_TENANT_A_SCHEMA`.\nNot `OUTBOX_SCHEMAS` nor `KAFKA_BROKER`.']]);
  assert.deepEqual(unknownVariables(pages, known), ['docs/x.md:2: OUTBOX_SCHEMAS', 'docs/x.md:2: KAFKA_BROKER']);
});
