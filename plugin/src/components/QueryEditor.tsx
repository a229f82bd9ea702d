import React, { ChangeEvent, useEffect, useState } from 'react';
import { QueryEditorProps, SelectableValue } from '@grafana/data';
import { Alert, InlineField, InlineFieldRow, InlineSwitch, Input, Select } from '@grafana/ui';

import type { DataSource } from '../datasource';
import { usesField, VALUE_FIELDS } from '../fields';
import {
  DEFAULT_QUERY,
  GROUP_BYS,
  GroupBy,
  LAG_ONLY_GROUP_BYS,
  QUERY_TYPE_LABELS,
  QUERY_TYPES,
  QueryType,
  Stage,
  STAGE_LABELS,
  STAGES,
  Tier,
  TIERS,
  TidemarkOptions,
  TidemarkQuery,
} from '../types';
import { formatPercentiles, parsePercentiles, validateQuery } from '../validate';

export type QueryEditorPropsT = QueryEditorProps<DataSource, TidemarkQuery, TidemarkOptions>;

const typeOptions: Array<SelectableValue<QueryType>> = QUERY_TYPES.map((t) => ({
  value: t,
  label: QUERY_TYPE_LABELS[t],
}));
const stageOptions: Array<SelectableValue<Stage>> = STAGES.map((s) => ({ value: s, label: STAGE_LABELS[s] }));
const groupByOptions: Array<SelectableValue<GroupBy>> = GROUP_BYS.map((g) => ({ value: g, label: g }));
const tierOptions: Array<SelectableValue<Tier>> = TIERS.map((t) => ({ value: t, label: t }));

const LABEL_WIDTH = 16;

/**
 * QueryEditor edits one Tidemark query: the query type picks which of the filters and options apply (see fields.ts);
 * text filters accept template variables. Problems the backend would reject are shown under the editor as the user
 * types, and the query only runs on blur or a select change, so half-typed values do not hit ClickHouse.
 */
export function QueryEditor({ query, onChange, onRunQuery }: QueryEditorPropsT) {
  const q: TidemarkQuery = { ...DEFAULT_QUERY, ...query };
  const committed = formatPercentiles(q.percentiles);
  const [percentText, setPercentText] = useState(committed);
  const [percentError, setPercentError] = useState('');
  // The query can change from outside the box (query history, a pasted query, a dashboard reload): show its levels.
  useEffect(() => {
    setPercentText(committed);
    setPercentError('');
  }, [committed]);

  const update = (patch: Partial<TidemarkQuery>, run = false) => {
    onChange({ ...query, ...patch });
    if (run) {
      onRunQuery();
    }
  };
  const text =
    (key: 'cluster' | 'topic' | 'group' | 'groupType' | 'host') =>
    (e: ChangeEvent<HTMLInputElement>) =>
      update({ [key]: e.currentTarget.value });
  const num =
    (key: 'sloThresholdMs' | 'sloObjective' | 'limit') =>
    (e: ChangeEvent<HTMLInputElement>) => {
      const v = e.currentTarget.value;
      update({ [key]: v === '' ? undefined : Number(v) });
    };
  const commitPercentiles = () => {
    const parsed = parsePercentiles(percentText);
    if ('error' in parsed) {
      setPercentError(parsed.error);
      return;
    }
    setPercentError('');
    setPercentText(formatPercentiles(parsed.values));
    update({ percentiles: parsed.values }, true);
  };

  const fieldsText = (q.fields ?? []).join(', ');
  const [fieldsDraft, setFieldsDraft] = useState(fieldsText);
  useEffect(() => setFieldsDraft(fieldsText), [fieldsText]);
  const commitFields = () => {
    const list = fieldsDraft
      .split(',')
      .map((f) => f.trim())
      .filter((f) => f !== '');
    update({ fields: list.length > 0 ? list : undefined }, true);
  };

  const problems = validateQuery(q);
  const show = (f: Parameters<typeof usesField>[1]) => usesField(q.queryType, f);

  return (
    <div data-testid="tidemark-query-editor">
      <InlineFieldRow>
        <InlineField label="Query type" labelWidth={LABEL_WIDTH}>
          <Select
            inputId="tidemark-query-type"
            width={32}
            options={typeOptions}
            value={q.queryType}
            onChange={(v) => update({ queryType: v.value }, true)}
          />
        </InlineField>
        {show('stage') && (
          <InlineField label="Stage" labelWidth={8}>
            <Select
              inputId="tidemark-stage"
              width={36}
              options={stageOptions}
              value={q.stage}
              onChange={(v) => update({ stage: v.value }, true)}
            />
          </InlineField>
        )}
      </InlineFieldRow>
      <InlineFieldRow>
        {show('cluster') && (
          <InlineField label="Cluster" labelWidth={LABEL_WIDTH} tooltip="Kafka cluster name, $cluster, or names joined by commas">
            <Input
              id="tidemark-cluster"
              width={16}
              value={q.cluster ?? ''}
              placeholder="all"
              onChange={text('cluster')}
              onBlur={onRunQuery}
            />
          </InlineField>
        )}
        {show('topic') && (
          <InlineField label="Topic" labelWidth={LABEL_WIDTH} tooltip="Exact name, $variable, or names joined by commas">
            <Input
              id="tidemark-topic"
              width={24}
              value={q.topic ?? ''}
              placeholder="all"
              onChange={text('topic')}
              onBlur={onRunQuery}
            />
          </InlineField>
        )}
        {show('group') && (
          <InlineField label="Group" labelWidth={8}>
            <Input
              id="tidemark-group"
              width={24}
              value={q.group ?? ''}
              placeholder="all"
              onChange={text('group')}
              onBlur={onRunQuery}
            />
          </InlineField>
        )}
        {show('groupType') && (
          <InlineField label="Type" labelWidth={8} tooltip="Kafka group types: classic, consumer (KIP-848), share, streams">
            <Input
              id="tidemark-group-type"
              width={20}
              value={q.groupType ?? ''}
              placeholder="all"
              onChange={text('groupType')}
              onBlur={onRunQuery}
            />
          </InlineField>
        )}
        {show('host') && (
          <InlineField label="Host" labelWidth={8} tooltip="Consumer host id, or broker id for probe health">
            <Input
              id="tidemark-host"
              width={20}
              value={q.host ?? ''}
              placeholder="all"
              onChange={text('host')}
              onBlur={onRunQuery}
            />
          </InlineField>
        )}
      </InlineFieldRow>
      <InlineFieldRow>
        {show('percentiles') && (
          <InlineField
            label="Percentiles"
            labelWidth={LABEL_WIDTH}
            invalid={!!percentError}
            error={percentError}
            tooltip="Percents or fractions: 50, 99, 99.9"
          >
            <Input
              id="tidemark-percentiles"
              width={24}
              value={percentText}
              onChange={(e: ChangeEvent<HTMLInputElement>) => setPercentText(e.currentTarget.value)}
              onBlur={commitPercentiles}
            />
          </InlineField>
        )}
        {show('groupBy') && (
          <InlineField label="Group by" labelWidth={10}>
            <Select
              inputId="tidemark-group-by"
              width={16}
              options={groupByOptions.filter(
                (o) => q.queryType === 'consumer_lag' || !LAG_ONLY_GROUP_BYS.includes(o.value as GroupBy)
              )}
              value={q.groupBy}
              onChange={(v) => update({ groupBy: v.value }, true)}
            />
          </InlineField>
        )}
        {show('sloThresholdMs') && (
          <InlineField label="Threshold (ms)" labelWidth={LABEL_WIDTH} tooltip="Good when end-to-end ≤ this">
            <Input
              id="tidemark-slo-threshold"
              type="number"
              width={12}
              value={q.sloThresholdMs ?? ''}
              onChange={num('sloThresholdMs')}
              onBlur={onRunQuery}
            />
          </InlineField>
        )}
        {show('sloObjective') && (
          <InlineField label="Objective" labelWidth={10} tooltip="Fraction of good messages, e.g. 0.999">
            <Input
              id="tidemark-slo-objective"
              type="number"
              step={0.001}
              width={12}
              value={q.sloObjective ?? ''}
              onChange={num('sloObjective')}
              onBlur={onRunQuery}
            />
          </InlineField>
        )}
        {show('limit') && (
          <InlineField label="Limit" labelWidth={8}>
            <Input
              id="tidemark-limit"
              type="number"
              width={10}
              value={q.limit ?? ''}
              onChange={num('limit')}
              onBlur={onRunQuery}
            />
          </InlineField>
        )}
        {show('includeReplays') && (
          <InlineField
            label="Include replays"
            labelWidth={LABEL_WIDTH}
            tooltip="Replayed (reprocessed) messages are measured separately and left out of live latency by default"
          >
            <InlineSwitch
              id="tidemark-include-replays"
              value={!!q.includeReplays}
              onChange={(e: React.FormEvent<HTMLInputElement>) => update({ includeReplays: e.currentTarget.checked }, true)}
            />
          </InlineField>
        )}
        {show('tier') && (
          <InlineField
            label="Tier"
            labelWidth={8}
            tooltip="auto reads raw rows, minute or hourly rollups by bucket width and cost (a week in 10-minute buckets gets hourly data); pin one to override"
          >
            <Select
              inputId="tidemark-tier"
              width={12}
              options={tierOptions}
              value={q.tier ?? 'auto'}
              onChange={(v) => update({ tier: v.value }, true)}
            />
          </InlineField>
        )}
        {show('fields') && (
          <InlineField
            label="Fields"
            labelWidth={8}
            tooltip={`Keep only these, e.g. for an alert rule: ${(q.queryType && VALUE_FIELDS[q.queryType]?.join(', ')) ?? ''}`}
          >
            <Input
              id="tidemark-fields"
              width={24}
              value={fieldsDraft}
              placeholder="all"
              onChange={(e: ChangeEvent<HTMLInputElement>) => setFieldsDraft(e.currentTarget.value)}
              onBlur={commitFields}
            />
          </InlineField>
        )}
      </InlineFieldRow>
      {problems.length > 0 && (
        <Alert title="This query will be rejected" severity="error">
          <ul>
            {problems.map((p) => (
              <li key={p}>{p}</li>
            ))}
          </ul>
        </Alert>
      )}
    </div>
  );
}
