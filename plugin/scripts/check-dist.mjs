// Checks the built dist/: module.js is one AMD define() whose dependencies are exactly Grafana's shared packages
// and whose factory returns the `plugin` export; plugin.json names the backend executable and has its placeholders
// filled. Grafana's loader is not available here, so the shared packages are stand-ins that record the calls.
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const dist = join(dirname(fileURLToPath(import.meta.url)), '../dist');
const fail = (msg) => {
  console.error('check-dist: ' + msg);
  process.exit(1);
};

const code = readFileSync(join(dist, 'module.js'), 'utf8');
let defined = 0;
let deps = [];
let factory;
new Function('define', code)((d, f) => {
  defined++;
  deps = d;
  factory = f;
});
if (defined !== 1) {
  fail(`module.js called define ${defined} times, want 1`);
}
const want = ['react', 'react-dom', '@grafana/data', '@grafana/ui', '@grafana/runtime', '@grafana/schema', 'rxjs', 'react/jsx-runtime'];
if (JSON.stringify(deps) !== JSON.stringify(want)) {
  fail(`AMD dependencies ${JSON.stringify(deps)}, want ${JSON.stringify(want)}`);
}

// Stand-in for a shared package: every export is a class whose setters chain and record what was set.
const calls = [];
const stub = () =>
  new Proxy(
    {},
    {
      get: (_, name) => {
        if (name === '__esModule') {
          return false;
        }
        return class {
          constructor(...args) {
            calls.push(`new ${String(name)}(${args.map((a) => typeof a).join(',')})`);
          }
          setConfigEditor(c) {
            calls.push(`setConfigEditor(${c.name})`);
            return this;
          }
          setQueryEditor(c) {
            calls.push(`setQueryEditor(${c.name})`);
            return this;
          }
          setVariableQueryEditor(c) {
            calls.push(`setVariableQueryEditor(${c.name})`);
            return this;
          }
        };
      },
    }
  );
const exported = factory(...deps.map(stub));
if (!exported || !exported.plugin) {
  fail('the module does not export `plugin`');
}
const wantCalls = ['new DataSourcePlugin(function)', 'setConfigEditor(', 'setQueryEditor(', 'setVariableQueryEditor('];
for (const w of wantCalls) {
  if (!calls.some((c) => c.startsWith(w))) {
    fail(`module.js never called ${w}…; calls: ${calls.join(' ')}`);
  }
}

const pj = JSON.parse(readFileSync(join(dist, 'plugin.json'), 'utf8'));
if (pj.executable !== 'gpx_tidemark' || !pj.backend || !pj.alerting || pj.info.version.includes('%')) {
  fail('plugin.json: want executable gpx_tidemark, backend and alerting true, version filled in');
}
console.log(`check-dist: module.js defines the plugin (${calls.join(', ')}); plugin.json ${pj.id} ${pj.info.version}`);
