import { execFile, execFileSync } from 'node:child_process';
import { createServer, request as httpRequest } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startLocalRegistry, type LocalRegistry } from '../../scripts/localRegistry.js';

// The schema registry the encoding tests register with, and the reference reader they prove
// the relay's bytes with: test/java/ConfluentWireReader.java, which decodes Confluent's wire
// format with Apache Avro, protobuf-java and a JSON Schema validator, fetching each writer
// schema by id from the registry as a consumer's deserializer would.

const ROOT = fileURLToPath(new URL('../../', import.meta.url));

export type { LocalRegistry } from '../../scripts/localRegistry.js';

/** One value as the reference libraries read it. */
export interface JavaDecoded {
  schemaId: number;
  schemaType: 'AVRO' | 'PROTOBUF' | 'JSON';
  /** Protobuf only: the message-index path after the header ([0] for the file's first message). */
  messageIndexes?: number[];
  /** Protobuf only: the full name of the message the path names, e.g. `pkg.Outer.Inner`. */
  messageType?: string;
  /**
   * The decoded value as JSON. Avro: GenericData's rendering (unions unwrapped, bytes as
   * ISO-8859-1 text, fixed as an array of signed bytes, decimals as numbers). Protobuf:
   * protobuf-java's JSON mapping with the .proto field names and fields at their default
   * included (64-bit integers as strings, enums by name). JSON: the body.
   */
  value: unknown;
}

let shared: Promise<string> | undefined;

/**
 * The registry for this test process: SCHEMA_REGISTRY_URL when set, else one local registry
 * started on first use (built first when needed: minutes on a fresh machine) and stopped when
 * the process exits. Tests share it; each registers under subjects of its own.
 */
export async function schemaRegistryUrl(): Promise<string> {
  const fromEnv = process.env.SCHEMA_REGISTRY_URL;
  if (fromEnv) return fromEnv;
  shared ??= startLocalRegistry().then((registry) => registry.url);
  return shared;
}

/** A registry of the test's own, to kill and start again (file storage: ids survive). The caller stops it. */
export async function startOwnRegistry(): Promise<LocalRegistry> {
  return startLocalRegistry();
}

/** A registry seen through {@link registryProxy}. */
export interface RegistryProxy {
  /** The proxy's URL, with the registry's path. */
  url: string;
  /** The paths of the schema registrations that went through (POST …/versions). */
  registrations: string[];
  /** While true, every request is answered 503, as a registry that is down behind a load balancer. */
  down: boolean;
  close(): Promise<void>;
}

/** An HTTP proxy in front of the registry at `upstreamUrl`: counts registrations and can play an outage. */
export async function registryProxy(upstreamUrl: string): Promise<RegistryProxy> {
  const upstream = new URL(upstreamUrl);
  const sockets = new Set<Socket>();
  const proxy: RegistryProxy = {
    url: '',
    registrations: [],
    down: false,
    close: () => {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
  const server = createServer((request, response) => {
    if (proxy.down) {
      request.resume();
      response.writeHead(503, { 'content-type': 'application/json' }).end('{"error_code":50301,"message":"down for the test"}');
      return;
    }
    if (request.method === 'POST' && /\/versions$/.test(request.url ?? '')) proxy.registrations.push(request.url!);
    const forward = httpRequest({ host: upstream.hostname, port: upstream.port, path: request.url, method: request.method, headers: request.headers }, (answer) => {
      response.writeHead(answer.statusCode ?? 502, answer.headers);
      answer.pipe(response);
    });
    forward.on('error', () => response.destroy());
    request.pipe(forward);
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  proxy.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}${upstream.pathname.replace(/\/$/, '')}`;
  return proxy;
}

let classpath: string | undefined;

/** Fetch and compile the reader unless done (scripts/java-reader.sh); its class path. */
function readerClasspath(): string {
  classpath ??= execFileSync(join(ROOT, 'scripts/java-reader.sh'), { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'] }).trim();
  return classpath;
}

/** A value the reference reader could not read, and its reason. */
export interface JavaUnreadable {
  error: string;
}

/**
 * Read each value (Confluent wire format: magic 0, 4-byte schema id, [Protobuf message
 * indexes], body) with the reference libraries, in one JVM; throws when any value is not
 * readable, naming each such value and the reader's reason.
 */
export async function readWithJava(registryUrl: string, values: Buffer[]): Promise<JavaDecoded[]> {
  const results = await readEachWithJava(registryUrl, values);
  const failures = results.flatMap((r, i) => ('error' in r ? [`value ${i} (${values[i]?.subarray(0, 16).toString('hex')}...): ${r.error}`] : []));
  if (failures.length > 0) throw new Error(`ConfluentWireReader could not read ${failures.length} of ${values.length} values:\n${failures.join('\n')}`);
  return results as JavaDecoded[];
}

/** The same, with the reader's reason in place of each value it could not read (for tests of bytes that must not be readable). */
export async function readEachWithJava(registryUrl: string, values: Buffer[]): Promise<(JavaDecoded | JavaUnreadable)[]> {
  if (values.length === 0) return [];
  const cp = readerClasspath();
  const input = values.map((v) => `${v.toString('base64')}\n`).join('');
  const stdout = await new Promise<string>((resolveOut, reject) => {
    // Short-lived: the C1 compiler alone and a small heap start it fastest.
    const child = execFile(
      'java',
      ['-XX:TieredStopAtLevel=1', '-XX:+UseSerialGC', '-Xmx256m', '-cp', cp, 'ConfluentWireReader', registryUrl],
      { maxBuffer: 256 * 1024 * 1024, encoding: 'utf8' },
      (error, out, err) => (error ? reject(new Error(`ConfluentWireReader failed: ${error.message}\n${err}`, { cause: error })) : resolveOut(out)),
    );
    child.stdin?.end(input);
  });
  const lines = stdout.split('\n').filter((l) => l !== '');
  if (lines.length !== values.length) throw new Error(`ConfluentWireReader answered ${lines.length} of ${values.length} values`);
  return lines.map((line) => JSON.parse(line) as JavaDecoded | JavaUnreadable);
}
