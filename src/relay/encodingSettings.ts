import * as settings from '../shared/settings.js';
import { loadEncodingsFile, resolveEncodingOptions, type EncodingOptions, type ResolvedEncodingOptions } from '../encodings/index.js';

export const encodingsFile = settings.text({
  option: 'encodingsFile',
  flag: '--encodings-file',
  env: 'OUTBOX_ENCODINGS_FILE',
  description: 'JSON file of value and key encodings by topic (Avro, Protobuf, JSON Schema through a schema registry; JSON where no rule matches). See docs/encodings.md.',
});

/** The relay's encodings: the `encodings` option, else the file `encodingsFile` names, else none (JSON as it is). */
export function relayEncodings(options: { encodings?: EncodingOptions | ResolvedEncodingOptions; encodingsFile?: string }): ResolvedEncodingOptions | undefined {
  if (options.encodings !== undefined) return resolveEncodingOptions(options.encodings, process.cwd());
  return options.encodingsFile ? loadEncodingsFile(options.encodingsFile) : undefined;
}
