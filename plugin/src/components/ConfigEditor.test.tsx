import { describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen } from '@testing-library/react';

import { addressProblem, ConfigEditor, ConfigEditorProps } from './ConfigEditor';

type Options = ConfigEditorProps['options'];

const base = {
  id: 1,
  uid: 'tm',
  orgId: 1,
  name: 'Tidemark',
  type: 'tidemark-kafka-datasource',
  access: 'proxy',
  url: '',
  jsonData: { address: 'clickhouse:9000', database: 'tidemark' },
  secureJsonFields: {},
} as unknown as Options;

describe('addressProblem', () => {
  it.each([
    ['clickhouse:9000', ''],
    ['[::1]:9440', ''],
    ['', ''],
    // the HTTP interface is not the native protocol the backend speaks
    ['http://clickhouse:8123', 'expected host:port of ClickHouse native protocol, e.g. clickhouse:9000 (not an http:// URL)'],
    ['clickhouse', 'expected host:port of ClickHouse native protocol, e.g. clickhouse:9000 (not an http:// URL)'],
    ['clickhouse:70000', 'port 70000 is outside 1–65535'],
  ])('%j', (addr, want) => {
    expect(addressProblem(addr)).toBe(want);
  });
});

describe('ConfigEditor', () => {
  it('stores the password as a secure setting', () => {
    const onOptionsChange = vi.fn();
    render(<ConfigEditor options={base} onOptionsChange={onOptionsChange} />);
    fireEvent.change(screen.getByPlaceholderText('password'), { target: { value: 's3cret' } });
    const next = onOptionsChange.mock.calls[0][0] as Options;
    expect(next.secureJsonData).toEqual({ password: 's3cret' });
    expect(next.jsonData).toEqual(base.jsonData);
  });

  it('shows a bad address', () => {
    render(
      <ConfigEditor options={{ ...base, jsonData: { address: 'http://ch:8123' } }} onOptionsChange={vi.fn()} />
    );
    expect(screen.getByText(/expected host:port of ClickHouse native protocol/)).toBeTruthy();
  });

  it('shows TLS options only when TLS is on', () => {
    const { rerender } = render(<ConfigEditor options={base} onOptionsChange={vi.fn()} />);
    expect(screen.queryByText('CA certificate')).toBeNull();
    rerender(
      <ConfigEditor options={{ ...base, jsonData: { ...base.jsonData, tlsEnabled: true } }} onOptionsChange={vi.fn()} />
    );
    expect(screen.getByText('CA certificate')).toBeTruthy();
  });

  it('stores the client certificate and key as secure settings, never in jsonData', () => {
    const onOptionsChange = vi.fn();
    const tls = { ...base, jsonData: { ...base.jsonData, tlsEnabled: true } } as Options;
    const { rerender } = render(<ConfigEditor options={tls} onOptionsChange={onOptionsChange} />);
    fireEvent.change(screen.getByPlaceholderText('-----BEGIN PRIVATE KEY-----'), { target: { value: 'KEY' } });
    let next = onOptionsChange.mock.calls[0][0] as Options;
    expect(next.secureJsonData).toEqual({ tlsClientKey: 'KEY' });
    expect(JSON.stringify(next.jsonData)).not.toContain('KEY');
    fireEvent.change(screen.getByPlaceholderText('-----BEGIN CERTIFICATE----- (client)'), { target: { value: 'CERT' } });
    next = onOptionsChange.mock.calls[1][0] as Options;
    expect(next.secureJsonData).toEqual({ tlsClientCert: 'CERT' });
    fireEvent.change(screen.getByPlaceholderText('clickhouse.internal'), { target: { value: 'ch.internal' } });
    next = onOptionsChange.mock.calls[2][0] as Options;
    expect(next.jsonData.tlsServerName).toBe('ch.internal');
    // Once saved, Grafana sends back only which secure fields are set: the form shows them configured, not their value.
    rerender(
      <ConfigEditor
        options={{ ...tls, secureJsonFields: { tlsClientKey: true, tlsClientCert: true, password: true } } as Options}
        onOptionsChange={onOptionsChange}
      />
    );
    expect(screen.getAllByText('Reset').length).toBeGreaterThanOrEqual(3);
  });

  it('resetting a configured key clears it in secureJsonData and secureJsonFields', () => {
    const onOptionsChange = vi.fn();
    const saved = {
      ...base,
      jsonData: { ...base.jsonData, tlsEnabled: true },
      secureJsonFields: { tlsClientKey: true },
    } as unknown as Options;
    render(<ConfigEditor options={saved} onOptionsChange={onOptionsChange} />);
    const resets = screen.getAllByText('Reset');
    fireEvent.click(resets[resets.length - 1]);
    const next = onOptionsChange.mock.calls[0][0] as Options;
    expect(next.secureJsonFields).toEqual({ tlsClientKey: false });
    expect(next.secureJsonData).toEqual({ tlsClientKey: '' });
  });

  it('sets the tracing datasource uid', () => {
    const onOptionsChange = vi.fn();
    render(<ConfigEditor options={base} onOptionsChange={onOptionsChange} />);
    fireEvent.change(screen.getByPlaceholderText('tempo'), { target: { value: 'tempo-prod' } });
    expect((onOptionsChange.mock.calls[0][0] as Options).jsonData.tracingDatasourceUid).toBe('tempo-prod');
  });

  it('sets the trace URL', () => {
    const onOptionsChange = vi.fn();
    render(<ConfigEditor options={base} onOptionsChange={onOptionsChange} />);
    fireEvent.change(screen.getByPlaceholderText('http://jaeger:16686/trace/${__value.raw}'), {
      target: { value: 'http://127.0.0.1:19686/trace/${__value.raw}' },
    });
    expect((onOptionsChange.mock.calls[0][0] as Options).jsonData.traceUrl).toBe('http://127.0.0.1:19686/trace/${__value.raw}');
  });
});
