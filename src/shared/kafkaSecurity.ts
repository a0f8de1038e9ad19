/**
 * Kafka transport security: TLS and SASL (SCRAM-SHA-256, SCRAM-SHA-512, PLAIN), as
 * settings and as the `ssl` and `sasl` parts of a kafkajs client config.
 *
 * The password is a secret: it comes only from KAFKA_SASL_PASSWORD or from the file named
 * by KAFKA_SASL_PASSWORD_FILE, never from a flag, and is never logged (the logger redacts
 * `sasl.password`; errors here never quote it).
 */
import { readFileSync } from 'node:fs';
import type { KafkaConfig, SASLOptions } from 'kafkajs';
import { createSecureContext, type ConnectionOptions } from 'node:tls';
import { ConfigError } from './errors.js';
import { boolean, text, type Setting } from './settings.js';

const SASL_MECHANISMS = ['none', 'plain', 'scram-sha-256', 'scram-sha-512'] as const;
/** SASL mechanisms the relay and the consumer speak to Kafka (`none` for no SASL). */
export type SaslMechanism = (typeof SASL_MECHANISMS)[number];

/** Kafka security options (library form of the settings below). */
export interface KafkaSecurityOptions {
  /** Connect with TLS (default false). Implied by any of the TLS files. */
  kafkaSsl?: boolean;
  /** PEM file of the CA(s) that signed the brokers' certificates (default: Node's CA store). */
  kafkaSslCaFile?: string;
  /** PEM client certificate for mutual TLS. */
  kafkaSslCertFile?: string;
  /** PEM private key of the client certificate. */
  kafkaSslKeyFile?: string;
  /** SASL mechanism (default none). */
  kafkaSaslMechanism?: SaslMechanism;
  kafkaSaslUsername?: string;
  /** A secret: from KAFKA_SASL_PASSWORD or KAFKA_SASL_PASSWORD_FILE. */
  kafkaSaslPassword?: string;
}

const kafkaSsl = boolean({
  option: 'kafkaSsl',
  flag: '--kafka-ssl',
  env: 'KAFKA_SSL',
  description: 'Connect to Kafka with TLS (true or false). Set implicitly by the KAFKA_SSL_*_FILE settings.',
  defaultValue: false,
});

export const kafkaSslCaFile = text({
  option: 'kafkaSslCaFile',
  flag: '--kafka-ssl-ca-file',
  env: 'KAFKA_SSL_CA_FILE',
  description: 'PEM file of the CA certificates that signed the Kafka brokers\' certificates (default: the system CAs).',
});
export const kafkaSslCertFile = text({
  option: 'kafkaSslCertFile',
  flag: '--kafka-ssl-cert-file',
  env: 'KAFKA_SSL_CERT_FILE',
  description: 'PEM client certificate, for brokers that require mutual TLS.',
});
export const kafkaSslKeyFile = text({
  option: 'kafkaSslKeyFile',
  flag: '--kafka-ssl-key-file',
  env: 'KAFKA_SSL_KEY_FILE',
  description: 'PEM private key of the client certificate.',
});

export const kafkaSaslMechanism: Setting<SaslMechanism> = {
  option: 'kafkaSaslMechanism',
  flag: '--kafka-sasl-mechanism',
  env: 'KAFKA_SASL_MECHANISM',
  description: `Kafka SASL mechanism: ${SASL_MECHANISMS.join(', ')}.`,
  defaultValue: 'none',
  parse(raw) {
    const v = raw.trim().toLowerCase();
    return (SASL_MECHANISMS as readonly string[]).includes(v)
      ? { value: v as SaslMechanism }
      : { problem: `${JSON.stringify(raw)} is not one of ${SASL_MECHANISMS.join(', ')}` };
  },
  check(value) {
    return SASL_MECHANISMS.includes(value) ? undefined : `${JSON.stringify(value)} is not one of ${SASL_MECHANISMS.join(', ')}`;
  },
};

export const kafkaSaslUsername = text({
  option: 'kafkaSaslUsername',
  flag: '--kafka-sasl-username',
  env: 'KAFKA_SASL_USERNAME',
  description: 'Kafka SASL user name.',
});

export const kafkaSaslPassword = text({
  option: 'kafkaSaslPassword',
  flag: undefined,
  env: 'KAFKA_SASL_PASSWORD',
  description: 'Kafka SASL password. A secret: environment or KAFKA_SASL_PASSWORD_FILE only, never a flag.',
  secret: true,
});

/** Every Kafka security setting, in the order the CLI and docs/configuration.md list them. */
export const KAFKA_SECURITY_SETTINGS = [
  kafkaSsl,
  kafkaSslCaFile,
  kafkaSslCertFile,
  kafkaSslKeyFile,
  kafkaSaslMechanism,
  kafkaSaslUsername,
  kafkaSaslPassword,
] as const;

const PEM_LABEL = { certificate: /-----BEGIN (TRUSTED )?CERTIFICATE-----/, 'private key': /-----BEGIN ([A-Z]+ )?PRIVATE KEY-----/ } as const;

/**
 * A PEM file's text. Refuses a file without the PEM block it should hold: Node ignores a
 * CA "certificate" that is not PEM without a word (a secret file named by mistake would
 * leave TLS on the system CAs). Never quotes the content.
 */
function readPem(file: string, setting: string, holds: keyof typeof PEM_LABEL): string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (error) {
    throw new ConfigError(setting, `cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? 'unreadable'}`);
  }
  if (!PEM_LABEL[holds].test(text)) throw new ConfigError(setting, `${file} holds no PEM ${holds} (no "-----BEGIN ${holds === 'certificate' ? 'CERTIFICATE' : 'PRIVATE KEY'}-----" line; the content is not shown)`);
  return text;
}

/** OpenSSL's reason (a code and a phrase, never the file's text) as a ConfigError naming the setting. */
function tlsCheck(setting: string, problem: string, options: ConnectionOptions): void {
  try {
    createSecureContext(options);
  } catch (error) {
    throw new ConfigError(setting, `${problem} (${(error as Error).message})`);
  }
}

/**
 * The `ssl` and `sasl` parts of a kafkajs config. Reads the TLS files now, so a missing
 * file fails at start with the setting's name.
 *
 * @throws ConfigError for an incomplete combination (a mechanism without user name or
 *   password, a certificate without its key, a password without a mechanism)
 */
export function kafkaSecurityConfig(options: KafkaSecurityOptions): Pick<KafkaConfig, 'ssl' | 'sasl'> {
  const mechanism = options.kafkaSaslMechanism ?? 'none';
  if (!SASL_MECHANISMS.includes(mechanism)) throw new ConfigError('kafkaSaslMechanism', `${JSON.stringify(mechanism)} is not one of ${SASL_MECHANISMS.join(', ')}`);
  const username = options.kafkaSaslUsername ?? '';
  const password = options.kafkaSaslPassword ?? '';
  const out: Pick<KafkaConfig, 'ssl' | 'sasl'> = {};

  const ca = options.kafkaSslCaFile ?? '';
  const cert = options.kafkaSslCertFile ?? '';
  const key = options.kafkaSslKeyFile ?? '';
  if ((cert === '') !== (key === '')) {
    throw new ConfigError(cert === '' ? 'kafkaSslCertFile' : 'kafkaSslKeyFile', 'a client certificate needs both KAFKA_SSL_CERT_FILE and KAFKA_SSL_KEY_FILE');
  }
  if (options.kafkaSsl || ca !== '' || cert !== '') {
    const tls: ConnectionOptions = {};
    if (ca !== '') tls.ca = [readPem(ca, 'kafkaSslCaFile', 'certificate')];
    if (cert !== '') {
      tls.cert = readPem(cert, 'kafkaSslCertFile', 'certificate');
      tls.key = readPem(key, 'kafkaSslKeyFile', 'private key');
      // Now, not at the first connection: a certificate that cannot be decoded, or a key
      // that does not fit it, would otherwise fail every connection attempt, logged, forever.
      tlsCheck('kafkaSslCertFile', 'is not a certificate TLS can use', { cert: tls.cert });
      tlsCheck('kafkaSslKeyFile', 'is not the private key of the client certificate', { cert: tls.cert, key: tls.key });
    }
    out.ssl = Object.keys(tls).length > 0 ? tls : true;
  }

  if (mechanism === 'none') {
    if (username !== '' || password !== '') {
      // Blame what was set: that is the setting the user typed.
      throw new ConfigError(username !== '' ? 'kafkaSaslUsername' : 'kafkaSaslPassword', 'is set but no SASL mechanism is (KAFKA_SASL_MECHANISM=scram-sha-512, for example)');
    }
    return out;
  }
  if (username === '') throw new ConfigError('kafkaSaslUsername', `is required with SASL mechanism ${mechanism}`);
  if (password === '') throw new ConfigError('kafkaSaslPassword', `is required with SASL mechanism ${mechanism} (KAFKA_SASL_PASSWORD or KAFKA_SASL_PASSWORD_FILE)`);
  out.sasl = { mechanism, username, password } as SASLOptions;
  return out;
}

/** Settings safe to log: what is configured, never the password or file contents. */
export function describeKafkaSecurity(options: KafkaSecurityOptions): Record<string, unknown> {
  const mechanism = options.kafkaSaslMechanism ?? 'none';
  return {
    tls: Boolean(options.kafkaSsl || options.kafkaSslCaFile || options.kafkaSslCertFile),
    clientCertificate: Boolean(options.kafkaSslCertFile),
    sasl: mechanism,
    ...(mechanism === 'none' ? {} : { saslUsername: options.kafkaSaslUsername }),
  };
}
