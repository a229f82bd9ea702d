// Screenshots of the plugin's editors for the docs: bundles harness/harness.tsx with the real @grafana/ui, opens it
// in headless Chromium (Debian's /usr/bin/chromium through playwright-core) and saves one PNG per editor under
// docs/screenshots/. Run by hand: `npm run screenshots` (needs `apt-get install chromium`); not part of `make test`.
import * as esbuild from 'esbuild';
import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const build = join(root, 'harness/build');
const out = join(root, '../docs/screenshots');
mkdirSync(build, { recursive: true });
mkdirSync(out, { recursive: true });

await esbuild.build({
  entryPoints: [join(root, 'harness/harness.tsx')],
  bundle: true,
  format: 'iife',
  platform: 'browser',
  target: 'es2020',
  jsx: 'automatic',
  outfile: join(build, 'harness.js'),
  define: { 'process.env.NODE_ENV': '"production"', global: 'globalThis' },
  loader: { '.css': 'empty', '.svg': 'empty', '.woff': 'empty', '.woff2': 'empty', '.png': 'empty' },
  logLevel: 'error',
});
writeFileSync(
  join(build, 'index.html'),
  '<!doctype html><html><head><meta charset="utf-8"><title>Tidemark editors</title></head>' +
    '<body style="margin:0"><div id="root"></div><script src="harness.js"></script></body></html>'
);

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking'],
});
try {
  const page = await browser.newPage({ viewport: { width: 1000, height: 1400 }, deviceScaleFactor: 1 });
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto('file://' + join(build, 'index.html'));
  await page.waitForSelector('[data-shot="variable-editor"]', { timeout: 30000 });
  await page.waitForTimeout(500);
  for (const el of await page.$$('[data-shot]')) {
    const id = await el.getAttribute('data-shot');
    await el.screenshot({ path: join(out, `${id}.png`) });
    console.log(`docs/screenshots/${id}.png`);
  }
  if (errors.length > 0) {
    throw new Error('page errors: ' + errors.join('; '));
  }
} finally {
  await browser.close();
}
