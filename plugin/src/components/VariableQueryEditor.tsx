import { ChangeEvent, useState } from 'react';
import { SelectableValue } from '@grafana/data';
import { InlineField, InlineFieldRow, Input, Select } from '@grafana/ui';

import { TidemarkVariableQuery, VARIABLE_KINDS, VariableKind } from '../types';

export interface VariableQueryEditorProps {
  query: TidemarkVariableQuery;
  onChange: (query: TidemarkVariableQuery, definition: string) => void;
}

const kindOptions: Array<SelectableValue<VariableKind>> = VARIABLE_KINDS.map((k) => ({ value: k, label: k }));

/** definition is the one-line summary Grafana shows in the variables list, e.g. "groups (topic=orders)". */
export function definition(q: TidemarkVariableQuery): string {
  const filters = [
    q.cluster ? `cluster=${q.cluster}` : '',
    q.topic ? `topic=${q.topic}` : '',
    q.group ? `group=${q.group}` : '',
  ].filter((s) => s !== '');
  return filters.length > 0 ? `${q.kind} (${filters.join(', ')})` : q.kind;
}

/**
 * VariableQueryEditor defines a template variable listing topics, groups, hosts or clusters seen in Tidemark's
 * tables, optionally narrowed to a cluster, a topic or a group (each may itself be a variable, for chained variables).
 */
export function VariableQueryEditor({ query, onChange }: VariableQueryEditorProps) {
  const [state, setState] = useState<TidemarkVariableQuery>({ ...query, kind: query?.kind ?? 'topics' });
  const save = (next: TidemarkVariableQuery) => {
    setState(next);
    onChange(next, definition(next));
  };
  return (
    <InlineFieldRow>
      <InlineField label="List" labelWidth={10}>
        <Select
          inputId="tidemark-variable-kind"
          width={16}
          options={kindOptions}
          value={state.kind}
          onChange={(v) => save({ ...state, kind: v.value ?? 'topics' })}
        />
      </InlineField>
      {state.kind !== 'clusters' && (
        <InlineField label="Cluster" labelWidth={8} tooltip="Only those seen in this cluster (may be $cluster)">
          <Input
            id="tidemark-variable-cluster"
            width={16}
            value={state.cluster ?? ''}
            onChange={(e: ChangeEvent<HTMLInputElement>) => setState({ ...state, cluster: e.currentTarget.value })}
            onBlur={() => save(state)}
          />
        </InlineField>
      )}
      {state.kind !== 'topics' && (
        <InlineField label="Topic" labelWidth={8} tooltip="Only those seen on this topic (may be $variable)">
          <Input
            id="tidemark-variable-topic"
            width={20}
            value={state.topic ?? ''}
            onChange={(e: ChangeEvent<HTMLInputElement>) => setState({ ...state, topic: e.currentTarget.value })}
            onBlur={() => save(state)}
          />
        </InlineField>
      )}
      {state.kind !== 'groups' && (
        <InlineField label="Group" labelWidth={8} tooltip="Only those seen for this group (may be $variable)">
          <Input
            id="tidemark-variable-group"
            width={20}
            value={state.group ?? ''}
            onChange={(e: ChangeEvent<HTMLInputElement>) => setState({ ...state, group: e.currentTarget.value })}
            onBlur={() => save(state)}
          />
        </InlineField>
      )}
    </InlineFieldRow>
  );
}
