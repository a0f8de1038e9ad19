/**
 * What kafkajs' 1 ms idle loop costs, with and without src/shared/kafkajsIdleFix.ts: a
 * connected kafkajs producer that has sent one message, then idle for 5 s; the process's
 * CPU (process.cpuUsage) over those 5 s. Each arm in a process of its own (the fix patches
 * kafkajs' prototype), alternating, 3 rounds. Writes bench/committed/<time>-kafkajs-idle.json.
 *
 *   KAFKA_BROKERS=host:port npx tsx bench/kafkajsIdle.ts
 */
import { execFileSync } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const IDLE_MS = 5_000;

async function arm(): Promise<void> {
  if (process.env.KAFKAJS_IDLE_FIX === '1') await import('../src/shared/kafkajsIdleFix.js');
  const { Kafka, logLevel } = await import('kafkajs');
  const kafka = new Kafka({ clientId: 'kafkajs-idle', brokers: (process.env.KAFKA_BROKERS ?? '').split(','), logLevel: logLevel.NOTHING });
  const producer = kafka.producer({ allowAutoTopicCreation: true });
  await producer.connect();
  await producer.send({ topic: 'kafkajs-idle-probe', messages: [{ value: 'x' }] });
  const before = process.cpuUsage();
  await new Promise((resolve) => setTimeout(resolve, IDLE_MS));
  const used = process.cpuUsage(before);
  // Still works after the idle time: the fix must not leave a request unsent.
  await producer.send({ topic: 'kafkajs-idle-probe', messages: [{ value: 'y' }] });
  await producer.disconnect();
  process.stdout.write(`${JSON.stringify({ cpuMs: (used.user + used.system) / 1000 })}\n`);
}

function main(): void {
  if (!process.env.KAFKA_BROKERS) throw new Error('KAFKA_BROKERS is required');
  const rounds: Array<{ fix: boolean; cpuMs: number }> = [];
  for (let i = 0; i < 3; i++) {
    for (const fix of [false, true]) {
      const out = execFileSync(process.execPath, [...process.execArgv, '--no-warnings', fileURLToPath(import.meta.url), '--arm'], { env: { ...process.env, KAFKAJS_IDLE_FIX: fix ? '1' : '0' }, encoding: 'utf8' });
      rounds.push({ fix, cpuMs: (JSON.parse(out.trim().split('\n').at(-1)!) as { cpuMs: number }).cpuMs });
    }
  }
  const result = { at: new Date().toISOString(), node: process.version, idleMs: IDLE_MS, rounds };
  const file = `bench/committed/${result.at.replace(/[:.]/g, '-')}-kafkajs-idle.json`;
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
  for (const r of rounds) process.stdout.write(`fix ${r.fix ? 'on ' : 'off'}: ${r.cpuMs.toFixed(1)} ms CPU in ${IDLE_MS / 1000} s idle (${((100 * r.cpuMs) / IDLE_MS).toFixed(2)} % of a core)\n`);
  process.stdout.write(`${file}\n`);
}

if (process.argv.includes('--arm')) await arm();
else main();
