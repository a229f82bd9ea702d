import { describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen } from '@testing-library/react';

import { definition, VariableQueryEditor } from './VariableQueryEditor';

describe('definition', () => {
  it.each([
    [{ kind: 'topics' as const }, 'topics'],
    [{ kind: 'groups' as const, topic: '$topic' }, 'groups (topic=$topic)'],
    [{ kind: 'hosts' as const, topic: 'orders', group: 'billing' }, 'hosts (topic=orders, group=billing)'],
  ])('%j', (q, want) => {
    expect(definition(q)).toBe(want);
  });
});

describe('VariableQueryEditor', () => {
  it('saves a topic filter for a groups variable on blur', () => {
    const onChange = vi.fn();
    const { container } = render(<VariableQueryEditor query={{ kind: 'groups' }} onChange={onChange} />);
    const topic = container.querySelector('#tidemark-variable-topic') as HTMLInputElement;
    // a groups variable can be narrowed by topic but not by group
    expect(container.querySelector('#tidemark-variable-group')).toBeNull();
    fireEvent.change(topic, { target: { value: 'orders' } });
    fireEvent.blur(topic);
    expect(onChange).toHaveBeenLastCalledWith({ kind: 'groups', topic: 'orders' }, 'groups (topic=orders)');
    expect(screen.getByDisplayValue('orders')).toBeTruthy();
  });
});
