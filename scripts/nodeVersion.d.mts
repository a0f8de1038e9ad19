// Types of scripts/nodeVersion.mjs, which stays plain JavaScript so that an old node runs it.
export function parseVersion(text: string): [number, number, number];
export function satisfies(version: string | [number, number, number], range: string): boolean;
export function enginesRange(packageJsonPath: string): string;
