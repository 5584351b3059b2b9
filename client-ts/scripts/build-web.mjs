// Writes the browser entry of the SDK (src/index.ts and the modules it
// imports, none of Node) as ES modules into producer-gw/web/sdk, where the
// gateway embeds them for its demo chat page: the gateway builds without
// Node, so the compiled copy is committed. `node scripts/build-web.mjs
// <dir>` writes it elsewhere (client-ts's TestWebSDKFresh compares the two).
// The directory is emptied first, so a module the entry no longer imports
// does not linger.

import { execFileSync } from 'node:child_process';
import { mkdirSync, readdirSync, rmSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const out = resolve(process.argv[2] ?? join(root, '..', 'producer-gw', 'web', 'sdk'));
mkdirSync(out, { recursive: true });
for (const f of readdirSync(out)) rmSync(join(out, f), { recursive: true });
const tsc = join(root, 'node_modules', '.bin', 'tsc');
execFileSync(tsc, ['-p', join(root, 'tsconfig.web.json'), '--outDir', out], { stdio: 'inherit' });
