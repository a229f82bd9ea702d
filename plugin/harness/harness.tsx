// A harness page that renders the plugin's editors with Grafana's real @grafana/ui components and theme, outside
// Grafana, so headless Chromium can take screenshots of them (scripts/screenshots.mjs). Not part of the plugin build.
import { useState } from 'react';
import { createRoot } from 'react-dom/client';
import { createTheme, DataSourceSettings, ThemeContext } from '@grafana/data';
import { GlobalStyles } from '@grafana/ui';

import { ConfigEditor } from '../src/components/ConfigEditor';
import { QueryEditor } from '../src/components/QueryEditor';
import { VariableQueryEditor } from '../src/components/VariableQueryEditor';
import type { DataSource } from '../src/datasource';
import { TidemarkOptions, TidemarkQuery, TidemarkSecureOptions, TidemarkVariableQuery } from '../src/types';

const theme = createTheme({ colors: { mode: 'dark' } });

const settings = {
  id: 1,
  uid: 'tidemark',
  orgId: 1,
  name: 'Tidemark',
  type: 'tidemark-kafka-datasource',
  typeName: 'Tidemark',
  typeLogoUrl: '',
  access: 'proxy',
  url: '',
  user: '',
  database: '',
  basicAuth: false,
  basicAuthUser: '',
  isDefault: false,
  readOnly: false,
  withCredentials: false,
  jsonData: {
    address: 'clickhouse:9440',
    database: 'tidemark',
    username: 'grafana',
    tlsEnabled: true,
    queryTimeoutSeconds: 30,
    tracingDatasourceUid: 'tempo',
  },
  secureJsonFields: { password: true },
} as DataSourceSettings<TidemarkOptions, TidemarkSecureOptions>;

function Config() {
  const [options, setOptions] = useState(settings);
  return <ConfigEditor options={options} onOptionsChange={setOptions} />;
}

function Query({ initial }: { initial: TidemarkQuery }) {
  const [query, setQuery] = useState(initial);
  return <QueryEditor datasource={{} as DataSource} query={query} onChange={setQuery} onRunQuery={() => undefined} />;
}

function Variable() {
  const [query, setQuery] = useState<TidemarkVariableQuery>({ kind: 'groups', topic: '$topic' });
  return <VariableQueryEditor query={query} onChange={(q) => setQuery(q)} />;
}

function Shot({ id, title, children }: { id: string; title: string; children: React.ReactNode }) {
  return (
    <section data-shot={id} style={{ padding: 16, marginBottom: 8, background: theme.colors.background.primary, width: 980 }}>
      <h4 style={{ marginBottom: 12 }}>{title}</h4>
      {children}
    </section>
  );
}

function App() {
  return (
    <ThemeContext.Provider value={theme}>
      <GlobalStyles />
      <div style={{ padding: 8, background: theme.colors.background.canvas }}>
        <Shot id="config-editor" title="Datasource settings">
          <Config />
        </Shot>
        <Shot id="query-editor-percentiles" title="Query editor: stage latency percentiles">
          <Query
            initial={{
              refId: 'A',
              queryType: 'stage_percentiles',
              stage: 'append_receive',
              topic: '$topic',
              group: 'billing',
              percentiles: [0.5, 0.99, 0.999],
              groupBy: 'host',
            }}
          />
        </Shot>
        <Shot id="query-editor-slo" title="Query editor: SLO burn rate, as an alert rule would ask for it">
          <Query
            initial={{ refId: 'A', queryType: 'slo', topic: 'orders', sloThresholdMs: 250, sloObjective: 0.999, fields: ['burn_rate'] }}
          />
        </Shot>
        <Shot id="query-editor-invalid" title="Query editor: a malformed filter is explained before the query runs">
          <Query initial={{ refId: 'A', queryType: 'consumer_lag', topic: 'orders,,payments', groupBy: 'group' }} />
        </Shot>
        <Shot id="variable-editor" title="Variable editor: consumer groups reading $topic">
          <Variable />
        </Shot>
      </div>
    </ThemeContext.Provider>
  );
}

createRoot(document.getElementById('root') as HTMLElement).render(<App />);
