// Draws the shipped dashboards from the frames the plugin's backend returned and the frames cmd/dashboard-frames made
// from a real Prometheus's query_range answers (one frame per series, as Grafana's Prometheus datasource), with Grafana's
// own components: frames decoded by @grafana/data's dataFrameFromJSON, field config applied by applyFieldOverrides,
// panels drawn by @grafana/ui's PanelChrome, TimeSeries (uPlot), BigValue and Table on the 24-column grid Grafana
// lays dashboards on. The barchart panel is drawn by TimeSeries in bar style on its numeric x field, since @grafana/ui
// does not export Grafana's BarChart panel. Panels of another datasource are left out of the picture, the rest float up as on Grafana's grid (vertical compaction), and the picture lists
// the left-out titles with the reason. Each panel reports what it drew on its element (data-values: non-null numbers handed to the
// component), which scripts/dashboards.mjs reads back. Not part of the plugin build.
import { createRoot } from 'react-dom/client';
import {
  applyFieldOverrides,
  createTheme,
  DataFrame,
  DataFrameJSON,
  dataFrameFromJSON,
  dateTime,
  FieldConfig,
  FieldConfigSource,
  FieldType,
  getFieldDisplayValues,
  ReduceDataOptions,
  ThemeContext,
  TimeRange,
} from '@grafana/data';
import {
  BigValue,
  BigValueColorMode,
  BigValueGraphMode,
  BigValueJustifyMode,
  BigValueTextMode,
  GlobalStyles,
  LegendDisplayMode,
  PanelChrome,
  Table,
  TimeSeries,
  VizLegendOptions,
} from '@grafana/ui';

type Result = { frames?: DataFrameJSON[]; error?: string };
type Panel = {
  id: number;
  type: string;
  title: string;
  gridPos: { x: number; y: number; w: number; h: number };
  fieldConfig: FieldConfigSource;
  options?: PanelOptions;
  datasource: string;
  results?: Record<string, Result>;
  excluded?: string;
  noData?: string;
};
// the panel options these dashboards set (timeseries legend, stat display, barchart x field)
type PanelOptions = {
  legend?: Partial<VizLegendOptions>;
  reduceOptions?: ReduceDataOptions;
  colorMode?: BigValueColorMode;
  graphMode?: BigValueGraphMode;
  textMode?: BigValueTextMode;
  xField?: string;
};
type Dashboard = { file: string; title: string; variables: Record<string, string>; panels: Panel[] };
type Shots = { from: number; to: number; intervalMs: number; dashboards: Dashboard[]; width: number };

const shots = (window as unknown as { TIDEMARK_SHOTS: Shots }).TIDEMARK_SHOTS;
const theme = createTheme({ colors: { mode: 'dark' } });
// Grafana's grid: 24 columns, rows of 30 px, 8 px between panels.
const COLS = 24;
const ROW = 30;
const GAP = 8;
const colWidth = (shots.width - GAP) / COLS;

const timeRange: TimeRange = {
  from: dateTime(shots.from),
  to: dateTime(shots.to),
  raw: { from: dateTime(shots.from), to: dateTime(shots.to) },
};

// Defaults of Grafana's timeseries panel for the custom field options the dashboards leave unset.
const graphDefaults = {
  drawStyle: 'line',
  lineInterpolation: 'linear',
  lineWidth: 1,
  fillOpacity: 0,
  gradientMode: 'none',
  showPoints: 'auto',
  pointSize: 5,
  spanNulls: false,
  axisPlacement: 'auto',
  axisBorderShow: false,
  barAlignment: 0,
  stacking: { mode: 'none', group: 'A' },
  thresholdsStyle: { mode: 'off' },
};

// prepare applies the panel's field config as Grafana's panels do: the panel's defaults (with Grafana's timeseries
// defaults beneath) fill what the datasource's own field config leaves unset, then applyFieldOverrides gives every
// field its display processor and series index.
function prepare(p: Panel, frames: DataFrame[]): DataFrame[] {
  const graph = p.type === 'timeseries' || p.type === 'barchart';
  const custom: Record<string, unknown> = graph ? { ...graphDefaults } : {};
  if (p.type === 'barchart') {
    Object.assign(custom, { drawStyle: 'bars', fillOpacity: 80, barAlignment: 0, barWidthFactor: 0.6 });
  }
  // Grafana's timeseries and barchart panels colour series from the classic palette unless the dashboard says otherwise
  const color = graph ? { color: { mode: 'palette-classic' } } : {};
  const defaults: FieldConfig = { ...color, ...p.fieldConfig.defaults, custom: { ...custom, ...(p.fieldConfig.defaults?.custom ?? {}) } };
  for (const f of frames) {
    for (const field of f.fields) {
      const own = field.config ?? {};
      field.config = { ...defaults, ...own, custom: { ...defaults.custom, ...(own.custom ?? {}) } };
    }
  }
  return applyFieldOverrides({
    data: frames,
    fieldConfig: { defaults: {}, overrides: p.fieldConfig.overrides ?? [] },
    replaceVariables: (s: string) => s,
    theme,
    timeZone: 'utc',
  });
}

// categories turns a barchart's string x field into its index (0, 1, ...) so uPlot can place the bars; the axis then
// shows the strings, as Grafana's BarChart panel does for a category field.
function categories(frames: DataFrame[], x: string): { frames: DataFrame[]; labels: string[] } {
  let labels: string[] = [];
  const out = frames.map((f) => ({
    ...f,
    fields: f.fields.map((field) => {
      if (field.name !== x || field.type !== FieldType.string) {
        return field;
      }
      labels = [...field.values].map(String);
      // the x scale spans the categories, half a bar beyond each end
      const config = { ...field.config, min: -0.5, max: labels.length - 0.5 };
      return { ...field, type: FieldType.number, values: labels.map((_, i) => i), config };
    }),
  }));
  return { frames: out, labels };
}

// values counts the non-null numbers of the frames' value fields (not time, not the barchart's x): what a
// visualization has to draw.
function values(frames: DataFrame[], xName?: string): number {
  let n = 0;
  for (const f of frames) {
    for (const field of f.fields) {
      if (field.type !== FieldType.number || field.name === xName) {
        continue;
      }
      for (const v of field.values) {
        if (v !== null && v !== undefined && !Number.isNaN(v)) {
          n++;
        }
      }
    }
  }
  return n;
}

type VizProps = { p: Panel; frames: DataFrame[]; width: number; height: number };

function Viz({ p, frames, width, height }: VizProps) {
  const legend = {
    showLegend: true,
    displayMode: LegendDisplayMode.List,
    placement: 'bottom' as const,
    calcs: [],
    ...(p.options?.legend ?? {}),
  };
  switch (p.type) {
    case 'timeseries':
      return <TimeSeries frames={frames} width={width} height={height} timeRange={timeRange} timeZone="utc" legend={legend} />;
    case 'barchart': {
      const x = String(p.options?.xField ?? '');
      return (
        <TimeSeries
          frames={frames}
          width={width}
          height={height}
          timeRange={timeRange}
          timeZone="utc"
          legend={legend}
          fields={{
            x: (f) => f.name === x,
            y: (f) => f.type === FieldType.number && f.name !== x,
          }}
        />
      );
    }
    case 'stat': {
      const o = p.options ?? {};
      const shown = getFieldDisplayValues({
        data: frames,
        reduceOptions: o.reduceOptions ?? { calcs: ['lastNotNull'], values: false },
        fieldConfig: p.fieldConfig,
        replaceVariables: (s: string) => s,
        sparkline: o.graphMode === 'area',
        theme,
        timeZone: 'utc',
      });
      const per = Math.max(1, shown.length);
      return (
        <div style={{ display: 'flex', width, height }}>
          {shown.map((v, i) => (
            <BigValue
              key={i}
              theme={theme}
              width={width / per}
              height={height}
              value={v.display}
              sparkline={v.sparkline}
              colorMode={o.colorMode ?? BigValueColorMode.Value}
              graphMode={o.graphMode ?? BigValueGraphMode.None}
              justifyMode={BigValueJustifyMode.Auto}
              textMode={o.textMode ?? BigValueTextMode.Auto}
              count={shown.length}
            />
          ))}
        </div>
      );
    }
    case 'table':
      return <Table data={frames[0]} width={width} height={height} />;
  }
  return <div>panel type {p.type} is not drawn here</div>;
}

function PanelBox({ p }: { p: Panel }) {
  const width = p.gridPos.w * colWidth - GAP;
  const height = p.gridPos.h * ROW + (p.gridPos.h - 1) * GAP;
  const style = { position: 'absolute' as const, left: p.gridPos.x * colWidth + GAP, top: p.gridPos.y * (ROW + GAP) };
  const errors: string[] = [];
  const raw: DataFrame[] = [];
  for (const r of Object.values(p.results ?? {})) {
    if (r.error) {
      errors.push(r.error);
    }
    for (const f of r.frames ?? []) {
      raw.push(dataFrameFromJSON(f));
    }
  }
  const xField = p.type === 'barchart' ? String(p.options?.xField ?? '') : undefined;
  const cat = xField !== undefined ? categories(raw, xField) : { frames: raw, labels: [] };
  const frames = prepare(p, cat.frames);
  if (xField !== undefined) {
    // the x axis names the category at each whole index (uPlot formats ticks through the field's display)
    for (const f of frames) {
      for (const field of f.fields) {
        if (field.name === xField) {
          field.display = (v: unknown) => ({ text: Number.isInteger(v) ? (cat.labels[v as number] ?? '') : '', numeric: Number(v) });
        }
      }
    }
  }
  const n = values(frames, xField);
  const rows = frames.reduce((s, f) => s + f.length, 0);
  return (
    <div style={style} data-panel={p.title} data-values={n} data-rows={rows} data-error={errors.join('; ')}>
      <PanelChrome width={width} height={height} title={p.title} statusMessage={errors.join('; ') || undefined}>
        {(w, h) =>
          rows === 0 ? (
            <div style={{ display: 'flex', alignItems: 'center', justifyContent: 'center', height: h }}>No data</div>
          ) : (
            <Viz p={p} frames={frames} width={w} height={h} />
          )
        }
      </PanelChrome>
    </div>
  );
}

// compact moves each panel up until it touches the one above, in order of position, as Grafana's grid does.
function compact(panels: Panel[]): Panel[] {
  const placed: Panel[] = [];
  const sorted = [...panels].sort((a, b) => a.gridPos.y - b.gridPos.y || a.gridPos.x - b.gridPos.x);
  for (const p of sorted) {
    const g = p.gridPos;
    let y = 0;
    for (const q of placed) {
      const h = q.gridPos;
      if (h.x < g.x + g.w && g.x < h.x + h.w) {
        y = Math.max(y, h.y + h.h);
      }
    }
    placed.push({ ...p, gridPos: { ...g, y } });
  }
  return placed;
}

function DashboardView({ d }: { d: Dashboard }) {
  const drawn = compact(d.panels.filter((p) => !p.excluded));
  const excluded = d.panels.filter((p) => p.excluded);
  const bottom = Math.max(...drawn.map((p) => p.gridPos.y + p.gridPos.h));
  const vars = Object.entries(d.variables)
    .filter(([, v]) => v !== '')
    .map(([k, v]) => `${k}=${v === '*' ? 'All' : v}`)
    .join('  ');
  return (
    <section data-dashboard={d.file} style={{ width: shots.width, background: theme.colors.background.canvas, paddingBottom: GAP }}>
      <div style={{ padding: '10px 8px 2px', color: theme.colors.text.primary }}>
        <span style={{ fontSize: 18 }}>{d.title}</span>
        <span style={{ marginLeft: 16, color: theme.colors.text.secondary, fontSize: 12 }}>
          {new Date(shots.from).toISOString().slice(0, 19)}Z – {new Date(shots.to).toISOString().slice(11, 19)}Z · {vars}
        </span>
      </div>
      <div style={{ padding: '0 8px 4px', color: theme.colors.text.secondary, fontSize: 11 }}>
        Frames from the Tidemark plugin&apos;s backend (QueryData over gRPC) and from a real Prometheus that scraped the run
        (query_range) after a short real load, drawn with Grafana&apos;s @grafana/ui components in headless Chromium; no
        Grafana server.
      </div>
      <div style={{ position: 'relative', height: bottom * (ROW + GAP) }}>
        {drawn.map((p) => (
          <PanelBox key={p.id} p={p} />
        ))}
      </div>
      {excluded.length > 0 && (
        <div data-excluded-list style={{ padding: '4px 8px', color: theme.colors.text.secondary, fontSize: 11 }}>
          Left out, {excluded.length} panel(s) that read {[...new Set(excluded.map((p) => p.datasource))].join(', ')}, not the
          Tidemark backend:{' '}
          {excluded.map((p) => p.title).join(' · ')}.
        </div>
      )}
    </section>
  );
}

function App() {
  return (
    <ThemeContext.Provider value={theme}>
      <GlobalStyles />
      {shots.dashboards.map((d) => (
        <DashboardView key={d.file} d={d} />
      ))}
      <div id="done" />
    </ThemeContext.Provider>
  );
}

createRoot(document.getElementById('root') as HTMLElement).render(<App />);
