import { VALUE_FIELDS } from './fields';
import { DEFAULT_QUERY, GROUP_BYS, GROUP_TYPES, LAG_ONLY_GROUP_BYS, QUERY_TYPES, STAGES, TidemarkQuery } from './types';

/** Most percentiles one query may ask for; the backend enforces the same bound. */
export const MAX_PERCENTILES = 10;

/** Kafka's legal topic characters (kafka.common.internals.Topic): ASCII letters, digits, '.', '_' and '-'. */
const TOPIC_NAME = /^[a-zA-Z0-9._-]{1,249}$/;

/**
 * parsePercentiles reads what a user types into the percentiles box: numbers separated by commas or spaces, each either
 * a fraction in (0, 1) ("0.99") or a percent in [1, 100) ("99", "p99.9"). It returns the sorted, de-duplicated fractions,
 * or an error message naming the bad item.
 */
export function parsePercentiles(text: string): { values: number[] } | { error: string } {
  const items = text
    .split(/[,\s]+/)
    .map((s) => s.trim())
    .filter((s) => s !== '');
  if (items.length === 0) {
    return { error: 'enter at least one percentile, e.g. 50, 99, 99.9' };
  }
  const values = new Set<number>();
  for (const item of items) {
    const raw = item.replace(/^p/i, '');
    const n = Number(raw);
    if (raw === '' || !Number.isFinite(n)) {
      return { error: `"${item}" is not a number` };
    }
    // 0 < n < 1 is already a fraction; 1 <= n < 100 is a percent.
    const f = n > 0 && n < 1 ? n : n >= 1 && n < 100 ? n / 100 : NaN;
    if (!Number.isFinite(f)) {
      return { error: `"${item}" is outside (0, 100): percentiles are fractions like 0.99 or percents like 99` };
    }
    values.add(Math.round(f * 1e6) / 1e6);
  }
  if (values.size > MAX_PERCENTILES) {
    return { error: `at most ${MAX_PERCENTILES} percentiles per query` };
  }
  return { values: [...values].sort((a, b) => a - b) };
}

/** formatPercentiles writes fractions back as percents for the text box: [0.5, 0.999] → "50, 99.9". */
export function formatPercentiles(values: number[] | undefined): string {
  return (values ?? []).map((v) => String(Math.round(v * 1e6) / 1e4)).join(', ');
}

/** splitFilter turns a filter value (one name, or several joined by commas by a multi-value variable) into names. */
export function splitFilter(value: string | undefined): string[] {
  if (!value) {
    return [];
  }
  return value.split(',').map((s) => s.trim());
}

/**
 * validateQuery returns the problems the backend would reject the query for, as messages for the editor. It mirrors
 * plugin/pkg/plugin/query.go's validation so the user sees the error before running the query; the backend still checks.
 * Values that still hold a template variable ($topic) are not checked: they are only known after interpolation.
 */
export function validateQuery(q: TidemarkQuery): string[] {
  const errs: string[] = [];
  if (!q.queryType || !(QUERY_TYPES as readonly string[]).includes(q.queryType)) {
    errs.push(`unknown query type "${q.queryType ?? ''}": choose one of ${QUERY_TYPES.join(', ')}`);
  }
  if (q.stage && !(STAGES as readonly string[]).includes(q.stage)) {
    errs.push(`unknown stage "${q.stage}": choose one of ${STAGES.join(', ')}`);
  }
  if (q.groupBy && !(GROUP_BYS as readonly string[]).includes(q.groupBy)) {
    errs.push(`unknown group by "${q.groupBy}": choose one of ${GROUP_BYS.join(', ')}`);
  } else if (q.groupBy && q.queryType !== 'consumer_lag' && LAG_ONLY_GROUP_BYS.includes(q.groupBy)) {
    errs.push(`only consumer lag can be grouped by ${q.groupBy}: choose none, topic, group or host`);
  }
  if (q.groupType && !q.groupType.includes('$')) {
    for (const gt of splitFilter(q.groupType).filter((g) => !(GROUP_TYPES as readonly string[]).includes(g))) {
      errs.push(`unknown group type "${gt}": choose one of ${GROUP_TYPES.join(', ')}`);
    }
  }
  for (const [name, value] of [
    ['topic', q.topic],
    ['group', q.group],
    ['host', q.host],
  ] as const) {
    if (!value || value.includes('$')) {
      continue;
    }
    const names = splitFilter(value);
    if (names.some((s) => s === '')) {
      errs.push(`${name} filter "${value}" is malformed: an empty name between commas`);
    } else if (name === 'topic') {
      for (const t of names.filter((t) => !TOPIC_NAME.test(t))) {
        errs.push(`topic filter "${t}" is not a Kafka topic name (letters, digits, '.', '_', '-')`);
      }
    }
  }
  for (const p of q.percentiles ?? []) {
    if (!(p > 0 && p < 1)) {
      errs.push(`percentile ${p} is outside (0, 1)`);
    }
  }
  if (q.sloObjective !== undefined && !(q.sloObjective > 0 && q.sloObjective < 1)) {
    errs.push(`SLO objective ${q.sloObjective} is outside (0, 1), e.g. 0.999 for 99.9%`);
  }
  if (q.sloThresholdMs !== undefined && !(q.sloThresholdMs > 0)) {
    errs.push(`SLO threshold ${q.sloThresholdMs} ms must be positive`);
  }
  if (q.fields && q.fields.length > 0 && q.queryType) {
    const valid = valueFields(q);
    if (valid.length === 0) {
      errs.push(`${q.queryType} has no fields to choose: clear Fields`);
    }
    for (const f of valid.length > 0 ? q.fields.filter((f) => !valid.includes(f)) : []) {
      errs.push(`${q.queryType} has no field "${f}": choose from ${valid.join(', ')}`);
    }
  }
  if (q.limit !== undefined && !(Number.isInteger(q.limit) && q.limit >= 1 && q.limit <= 1000)) {
    errs.push(`limit ${q.limit} must be a whole number from 1 to 1000`);
  }
  return errs;
}

/**
 * levelName names a percentile's field as the backend does (plugin/pkg/plugin/frames.go levelName): the percent
 * rounded to 3 decimals, so 0.99 → "p99", 0.999 → "p99.9", 0.123456 → "p12.346".
 */
export function levelName(level: number): string {
  return 'p' + String(Math.round(level * 1e5) / 1e3);
}

/** valueFields lists the value fields the backend returns for q (plugin/pkg/plugin/query.go FieldNames). */
export function valueFields(q: TidemarkQuery): string[] {
  if (q.queryType === 'stage_percentiles') {
    const levels = (q.percentiles ?? DEFAULT_QUERY.percentiles ?? []).map(levelName);
    // each level's estimate, then each level's band (the true percentile lies between _lower and _upper)
    return [...levels, ...levels.flatMap((l) => [l + '_lower', l + '_upper']), 'samples', 'unbounded'];
  }
  return [...((q.queryType && VALUE_FIELDS[q.queryType]) ?? [])];
}
