import { DataSourceInstanceSettings, MetricFindValue, ScopedVars } from '@grafana/data';
import { DataSourceWithBackend, getTemplateSrv, TemplateSrv } from '@grafana/runtime';

import { DEFAULT_QUERY, TidemarkOptions, TidemarkQuery, TidemarkVariableQuery, VARIABLE_KINDS } from './types';

/**
 * DataSource is the frontend half of the Tidemark datasource. Queries run in the Go backend (so alerting works); this
 * class interpolates template variables into the filter fields and lists topics, groups and hosts for variables
 * through the backend's resource handler.
 */
export class DataSource extends DataSourceWithBackend<TidemarkQuery, TidemarkOptions> {
  constructor(
    instanceSettings: DataSourceInstanceSettings<TidemarkOptions>,
    private readonly templateSrv: TemplateSrv = getTemplateSrv()
  ) {
    super(instanceSettings);
  }

  getDefaultQuery(): Partial<TidemarkQuery> {
    return DEFAULT_QUERY;
  }

  /** Hidden queries and queries without a type are not sent. */
  filterQuery(query: TidemarkQuery): boolean {
    return !query.hide && !!query.queryType;
  }

  /**
   * applyTemplateVariables replaces $variables in the filters. A multi-value variable becomes a comma-separated list,
   * which the backend splits and binds as an array parameter; "All" becomes every value the variable lists.
   */
  applyTemplateVariables(query: TidemarkQuery, scopedVars: ScopedVars): TidemarkQuery {
    return {
      ...query,
      cluster: this.interpolate(query.cluster, scopedVars),
      topic: this.interpolate(query.topic, scopedVars),
      group: this.interpolate(query.group, scopedVars),
      host: this.interpolate(query.host, scopedVars),
    };
  }

  /** metricFindQuery answers template variable queries: topics, groups, hosts or clusters seen in Tidemark's tables. */
  async metricFindQuery(query: TidemarkVariableQuery, options?: { scopedVars?: ScopedVars }): Promise<MetricFindValue[]> {
    const kind = VARIABLE_KINDS.includes(query?.kind) ? query.kind : 'topics';
    const params: Record<string, string> = {};
    const topic = this.interpolate(query?.topic, options?.scopedVars ?? {});
    const group = this.interpolate(query?.group, options?.scopedVars ?? {});
    const cluster = this.interpolate(query?.cluster, options?.scopedVars ?? {});
    if (cluster) {
      params.cluster = cluster;
    }
    if (topic) {
      params.topic = topic;
    }
    if (group) {
      params.group = group;
    }
    const res: { values?: string[] } = await this.getResource(kind, params);
    return (res.values ?? []).map((text) => ({ text, value: text }));
  }

  private interpolate(value: string | undefined, scopedVars: ScopedVars): string | undefined {
    if (!value) {
      return value;
    }
    return this.templateSrv.replace(value, scopedVars, 'csv');
  }
}
