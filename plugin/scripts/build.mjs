// Builds the frontend into dist/: module.js (AMD, the format Grafana's SystemJS loader takes for plugins, with
// Grafana's shared packages left external), plugin.json with version and date filled in, and the logo.
// Grafana's own template uses webpack; esbuild gives the same output here with one small dependency.
import * as esbuild from 'esbuild';
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const dist = join(root, 'dist');

// Packages Grafana provides at runtime; bundling a second copy would break React context and theming.
const shared = ['react', 'react-dom', '@grafana/data', '@grafana/ui', '@grafana/runtime', '@grafana/schema', 'rxjs'];

const result = await esbuild.build({
  entryPoints: [join(root, 'src/module.ts')],
  bundle: true,
  format: 'cjs',
  platform: 'browser',
  target: 'es2020',
  jsx: 'automatic',
  minify: true,
  sourcemap: false,
  external: [...shared, 'react/jsx-runtime'],
  write: false,
  logLevel: 'warning',
});

// Wrap the CommonJS bundle as an AMD module whose dependencies are the shared packages.
const deps = [...shared, 'react/jsx-runtime'];
const body = result.outputFiles[0].text;
const amd =
  `define(${JSON.stringify(deps)}, function(${deps.map((_, i) => `d${i}`).join(', ')}) {\n` +
  `var __deps = {${deps.map((d, i) => `${JSON.stringify(d)}: d${i}`).join(', ')}};\n` +
  `var require = function(name) { if (name in __deps) { return __deps[name]; } throw new Error('tidemark plugin: unknown module ' + name); };\n` +
  `var module = { exports: {} }; var exports = module.exports;\n` +
  `${body}\nreturn module.exports;\n});\n`;

mkdirSync(join(dist, 'img'), { recursive: true });
writeFileSync(join(dist, 'module.js'), amd);
const pkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'));
const pluginJson = readFileSync(join(root, 'src/plugin.json'), 'utf8')
  .replace('%VERSION%', pkg.version)
  .replace('%TODAY%', new Date().toISOString().slice(0, 10));
writeFileSync(join(dist, 'plugin.json'), pluginJson);
copyFileSync(join(root, 'src/img/logo.svg'), join(dist, 'img/logo.svg'));
copyFileSync(join(root, 'README.md'), join(dist, 'README.md'));
console.log(`dist/module.js ${(amd.length / 1024).toFixed(1)} KiB`);
