// Pictures of the shipped dashboards from the plugin backend's frames: bundles harness/dashboards.tsx (Grafana's
// @grafana/ui and @grafana/data) with the frames cmd/dashboard-frames wrote, opens it in headless Chromium (Debian's
// /usr/bin/chromium through playwright-core) and writes one PNG per dashboard, dashboard-<name>.png, and
// dashboards-manifest.json (what every panel drew) into OUTDIR.
//
// Usage: node scripts/dashboards.mjs FRAMES.json OUTDIR   (deploy/screenshots/run.sh runs it; make screenshots)
//
// Exits non-zero when any panel (Tidemark or Prometheus) drew nothing: no frames, a query error, no non-null value,
// or no chart/value/table rows on the page; when a panel is neither drawn nor listed as left out; or on a page error.
import * as esbuild from 'esbuild';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const [framesFile, out] = process.argv.slice(2);
if (!framesFile || !out) {
  console.error('usage: node scripts/dashboards.mjs FRAMES.json OUTDIR');
  process.exit(2);
}
const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const build = mkdtempSync(join(tmpdir(), 'tidemark-dashboards-'));
const profile = mkdtempSync(join(tmpdir(), 'tidemark-chromium-'));
const WIDTH = 1200;
mkdirSync(out, { recursive: true });

// @grafana/ui's .mjs files import the default export of CommonJS packages compiled from ES modules (exports.default);
// esbuild gives an .mjs importer Node's reading (default = module.exports), so these go through a shim that hands on
// exports.default, as webpack does when Grafana bundles @grafana/ui.
const cjsDefaults = /^(react-custom-scrollbars-2)$/;
const cjsDefault = {
  name: 'cjs-default',
  setup(b) {
    b.onResolve({ filter: cjsDefaults }, (args) =>
      args.namespace === 'cjs-default' ? undefined : { path: args.path, namespace: 'cjs-default' }
    );
    b.onLoad({ filter: /.*/, namespace: 'cjs-default' }, (args) => ({
      contents: `import * as m from ${JSON.stringify(args.path)}; export default m.default; export * from ${JSON.stringify(args.path)};`,
      resolveDir: root,
    }));
  },
};

const shots = JSON.parse(readFileSync(framesFile, 'utf8'));
shots.width = WIDTH;

let failures = [];
try {
  await esbuild.build({
    entryPoints: [join(root, 'harness/dashboards.tsx')],
    bundle: true,
    format: 'iife',
    platform: 'browser',
    target: 'es2020',
    jsx: 'automatic',
    outfile: join(build, 'dashboards.js'),
    define: { 'process.env.NODE_ENV': process.env.SHOTS_DEV ? '"development"' : '"production"', global: 'globalThis' },
    // the stylesheets @grafana/ui imports (uPlot's among them) go to dashboards.css, which the page links
    loader: { '.css': 'css', '.svg': 'empty', '.woff': 'empty', '.woff2': 'empty', '.ttf': 'empty', '.png': 'empty' },
    logLevel: 'error',
    plugins: [cjsDefault],
  });
  writeFileSync(join(build, 'data.js'), 'window.TIDEMARK_SHOTS = ' + JSON.stringify(shots) + ';\n');
  writeFileSync(
    join(build, 'index.html'),
    '<!doctype html><html><head><meta charset="utf-8"><title>Tidemark dashboards</title>' +
      '<link rel="stylesheet" href="dashboards.css"></head>' +
      '<body style="margin:0"><div id="root"></div><script src="data.js"></script><script src="dashboards.js"></script></body></html>'
  );

  const context = await chromium.launchPersistentContext(profile, {
    executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
    headless: true,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
    viewport: { width: WIDTH, height: 1000 },
    deviceScaleFactor: 1,
  });
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    // console errors, but not resources the bundle leaves out (fonts, images: the 'empty' loader above)
    page.on('console', (m) => m.type() === 'error' && !/Failed to load resource/.test(m.text()) && errors.push(m.text()));
    await page.goto('file://' + join(build, 'index.html'));
    await page.waitForSelector('#done', { state: 'attached', timeout: 20000 }).catch((e) => {
      throw new Error(`the page did not render: ${e.message}\npage errors: ${errors.join('; ')}`);
    });
    // uPlot draws on the next animation frames; wait until every chart panel has its canvas.
    await page.waitForFunction(
      () =>
        [...globalThis.document.querySelectorAll('[data-values]')].every(
          (el) => Number(el.getAttribute('data-values')) === 0 || el.querySelector('canvas, [role="row"], [role="table"], div') !== null
        ),
      null,
      { timeout: 30000 }
    );
    await page.waitForTimeout(500);

    // What each panel put on the page.
    const drawn = await page.evaluate(() =>
      [...globalThis.document.querySelectorAll('[data-dashboard]')].flatMap((d) =>
        [...d.querySelectorAll('[data-panel]')].map((el) => ({
          dashboard: d.getAttribute('data-dashboard'),
          title: el.getAttribute('data-panel'),
          values: Number(el.getAttribute('data-values')),
          rows: Number(el.getAttribute('data-rows')),
          error: el.getAttribute('data-error') || '',
          canvases: el.querySelectorAll('canvas').length,
          tableRows: el.querySelectorAll('[role="row"]').length,
          text: (el.textContent || '').slice(0, 200),
        }))
      )
    );

    for (const section of await page.$$('[data-dashboard]')) {
      const file = await section.getAttribute('data-dashboard');
      const png = join(out, 'dashboard-' + file.replace(/\.json$/, '') + '.png');
      await section.screenshot({ path: png });
      console.log(png);
    }

    const manifest = [];
    for (const d of shots.dashboards) {
      for (const p of d.panels) {
        const seen = drawn.find((x) => x.dashboard === d.file && x.title === p.title);
        const entry = { dashboard: d.file, panel: p.title, type: p.type, datasource: p.datasource };
        if (p.excluded) {
          manifest.push({ ...entry, excluded: p.excluded });
          if (seen) failures.push(`${d.file} / ${p.title}: left out but drawn`);
          continue;
        }
        if (!seen) {
          failures.push(`${d.file} / ${p.title}: neither drawn nor left out`);
          continue;
        }
        const onPage =
          p.type === 'table' ? seen.tableRows > 1 : p.type === 'stat' ? !/No data/.test(seen.text) && seen.text.length > p.title.length : seen.canvases > 0;
        // noData: the panel's query legitimately has nothing in a short run, with the reason (cmd/dashboard-frames)
        const noData = p.noData && seen.values === 0 && !seen.error ? p.noData : undefined;
        manifest.push({ ...entry, rows: seen.rows, values: seen.values, error: seen.error || undefined, onPage, noData });
        if (seen.error) failures.push(`${d.file} / ${p.title}: query error: ${seen.error}`);
        if (noData) continue;
        if (seen.values === 0) failures.push(`${d.file} / ${p.title}: no value to draw (${seen.rows} rows)`);
        if (!onPage) failures.push(`${d.file} / ${p.title}: nothing drawn on the page (${p.type})`);
      }
    }
    writeFileSync(join(out, 'dashboards-manifest.json'), JSON.stringify(manifest, null, 1) + '\n');
    if (errors.length > 0) {
      failures.push('page errors: ' + errors.join('; '));
    }
    const count = (ds, f) => manifest.filter((m) => m.datasource === ds && f(m)).length;
    const drew = (m) => !m.excluded && !m.noData && m.values > 0;
    const tm = count('tidemark-kafka-datasource', drew);
    const pr = count('prometheus', drew);
    const none = manifest.filter((m) => m.noData).length;
    const left = manifest.filter((m) => m.excluded).length;
    console.log(
      `${tm} Tidemark panels drawn from the backend's frames, ${pr} Prometheus panels drawn from a real Prometheus's queries, ` +
        `${none} panels with no data (reason in the manifest), ${left} left out`,
    );
  } finally {
    await context.close();
  }
} finally {
  rmSync(build, { recursive: true, force: true });
  rmSync(profile, { recursive: true, force: true });
}
if (failures.length > 0) {
  console.error('dashboards: panels that drew nothing from the real backend:\n  ' + failures.join('\n  '));
  process.exit(1);
}
