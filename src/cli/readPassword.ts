import { ConfigError } from '../shared/errors.js';

// A password for `outbox-relay console-user`: typed at the terminal without echo (twice,
// to catch a typo), or the first line of stdin when it is not a terminal (a pipe from a
// secret store). Never an argument: argv is visible to every user of the machine.

function readLineHidden(prompt: string): Promise<string> {
  const stdin = process.stdin;
  process.stderr.write(prompt);
  stdin.setRawMode(true);
  stdin.resume();
  stdin.setEncoding('utf8');
  return new Promise((resolve, reject) => {
    let text = '';
    const done = (error?: Error): void => {
      stdin.off('data', onData);
      stdin.setRawMode(false);
      stdin.pause();
      process.stderr.write('\n');
      if (error) reject(error);
      else resolve(text);
    };
    const onData = (chunk: string): void => {
      for (const c of chunk) {
        if (c === '\r' || c === '\n') return done();
        if (c === '\u0003') return done(new ConfigError('password', 'interrupted'));
        if (c === '\u007f' || c === '\b') text = text.slice(0, -1);
        else text += c;
      }
    };
    stdin.on('data', onData);
  });
}

async function readStdin(): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of process.stdin) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8').split(/\r?\n/)[0] ?? '';
}

/** The password, from the terminal (asked twice) or the first line of stdin. */
export async function readPassword(): Promise<string> {
  if (!process.stdin.isTTY) return readStdin();
  const first = await readLineHidden('password: ');
  const second = await readLineHidden('again: ');
  if (first !== second) throw new ConfigError('password', 'the two entries differ');
  return first;
}
