// Some npm packages ship Go sources (flatted does). A go.mod in node_modules makes it a separate module, so the
// repository's `go build ./...` / `go test ./...` never compile them. Runs as the package's postinstall.
import { writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
writeFileSync(join(root, 'node_modules/go.mod'), 'module tidemark.invalid/plugin/node_modules\n\ngo 1.26\n');
