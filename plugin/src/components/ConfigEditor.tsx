import React, { ChangeEvent } from 'react';
import { DataSourcePluginOptionsEditorProps } from '@grafana/data';
import { Field, FieldSet, Input, SecretInput, SecretTextArea, Switch } from '@grafana/ui';

import { TidemarkOptions, TidemarkSecureOptions } from '../types';

export type ConfigEditorProps = DataSourcePluginOptionsEditorProps<TidemarkOptions, TidemarkSecureOptions>;

/** addressProblem returns why a ClickHouse address is unusable, or '' when it looks like host:port. */
export function addressProblem(address: string | undefined): string {
  if (!address) {
    return '';
  }
  const m = /^(\[[^\]]+\]|[^:\s/]+):(\d{1,5})$/.exec(address.trim());
  if (!m) {
    return 'expected host:port of ClickHouse native protocol, e.g. clickhouse:9000 (not an http:// URL)';
  }
  const port = Number(m[2]);
  if (port < 1 || port > 65535) {
    return `port ${port} is outside 1–65535`;
  }
  return '';
}

/**
 * ConfigEditor edits the datasource settings: where ClickHouse is, who to log in as, TLS (CA, client certificate,
 * server name), and which tracing datasource slowest-message trace ids link to. The password, the CA certificate and
 * the client certificate and key are secure settings: Grafana encrypts them, only the backend sees them, and once
 * saved the browser only learns that they are set (a configured field shows "configured" with a Reset button).
 */
export function ConfigEditor({ options, onOptionsChange }: ConfigEditorProps) {
  const { jsonData, secureJsonFields } = options;
  const secure = options.secureJsonData ?? {};

  const setJson = <K extends keyof TidemarkOptions>(key: K, value: TidemarkOptions[K]) =>
    onOptionsChange({ ...options, jsonData: { ...jsonData, [key]: value } });
  const setSecure = (key: keyof TidemarkSecureOptions, value: string) =>
    onOptionsChange({ ...options, secureJsonData: { ...secure, [key]: value } });
  const resetSecure = (key: keyof TidemarkSecureOptions) =>
    onOptionsChange({
      ...options,
      secureJsonFields: { ...secureJsonFields, [key]: false },
      secureJsonData: { ...secure, [key]: '' },
    });

  const addrErr = addressProblem(jsonData.address);

  return (
    <>
      <FieldSet label="ClickHouse">
        <Field
          label="Address"
          description="host:port of ClickHouse's native protocol (TCP, usually 9000; 9440 with TLS)"
          invalid={!!addrErr}
          error={addrErr}
          required
        >
          <Input
            id="tidemark-address"
            width={40}
            value={jsonData.address ?? ''}
            placeholder="clickhouse:9000"
            onChange={(e: ChangeEvent<HTMLInputElement>) => setJson('address', e.currentTarget.value)}
          />
        </Field>
        <Field label="Database" description="The database Tidemark's collector writes to">
          <Input
            id="tidemark-database"
            width={40}
            value={jsonData.database ?? ''}
            placeholder="tidemark"
            onChange={(e: ChangeEvent<HTMLInputElement>) => setJson('database', e.currentTarget.value)}
          />
        </Field>
        <Field label="User" description="A read-only ClickHouse user is enough">
          <Input
            id="tidemark-username"
            width={40}
            value={jsonData.username ?? ''}
            placeholder="default"
            onChange={(e: ChangeEvent<HTMLInputElement>) => setJson('username', e.currentTarget.value)}
          />
        </Field>
        <Field label="Password">
          <SecretInput
            id="tidemark-password"
            width={40}
            isConfigured={!!secureJsonFields?.password}
            value={secure.password ?? ''}
            placeholder="password"
            onReset={() => resetSecure('password')}
            onChange={(e: ChangeEvent<HTMLInputElement>) => setSecure('password', e.currentTarget.value)}
          />
        </Field>
        <Field label="Query timeout (s)" description="Server-side limit per query (max_execution_time); default 30">
          <Input
            id="tidemark-timeout"
            type="number"
            width={20}
            min={1}
            max={600}
            value={jsonData.queryTimeoutSeconds ?? ''}
            placeholder="30"
            onChange={(e: ChangeEvent<HTMLInputElement>) => {
              const v = e.currentTarget.value;
              setJson('queryTimeoutSeconds', v === '' ? undefined : Number(v));
            }}
          />
        </Field>
      </FieldSet>
      <FieldSet label="TLS">
        <Field label="Use TLS" description="Connect to the secure native port">
          <Switch
            id="tidemark-tls"
            value={!!jsonData.tlsEnabled}
            onChange={(e: React.FormEvent<HTMLInputElement>) => setJson('tlsEnabled', e.currentTarget.checked)}
          />
        </Field>
        {jsonData.tlsEnabled && (
          <>
            <Field label="Skip certificate verification" description="Only for testing: accepts any server certificate">
              <Switch
                id="tidemark-tls-skip"
                value={!!jsonData.tlsSkipVerify}
                onChange={(e: React.FormEvent<HTMLInputElement>) => setJson('tlsSkipVerify', e.currentTarget.checked)}
              />
            </Field>
            <Field label="CA certificate" description="PEM; empty uses the system roots">
              <SecretTextArea
                id="tidemark-tls-ca"
                rows={4}
                cols={60}
                isConfigured={!!secureJsonFields?.tlsCACert}
                value={secure.tlsCACert ?? ''}
                placeholder="-----BEGIN CERTIFICATE-----"
                onReset={() => resetSecure('tlsCACert')}
                onChange={(e: ChangeEvent<HTMLTextAreaElement>) => setSecure('tlsCACert', e.currentTarget.value)}
              />
            </Field>
            <Field
              label="Server name"
              description="The name the server's certificate carries, when it is not the address's host"
            >
              <Input
                id="tidemark-tls-server-name"
                width={40}
                value={jsonData.tlsServerName ?? ''}
                placeholder="clickhouse.internal"
                onChange={(e: ChangeEvent<HTMLInputElement>) => setJson('tlsServerName', e.currentTarget.value)}
              />
            </Field>
            <Field label="Client certificate" description="PEM, for servers that require mutual TLS; with the client key">
              <SecretTextArea
                id="tidemark-tls-client-cert"
                rows={4}
                cols={60}
                isConfigured={!!secureJsonFields?.tlsClientCert}
                value={secure.tlsClientCert ?? ''}
                placeholder="-----BEGIN CERTIFICATE----- (client)"
                onReset={() => resetSecure('tlsClientCert')}
                onChange={(e: ChangeEvent<HTMLTextAreaElement>) => setSecure('tlsClientCert', e.currentTarget.value)}
              />
            </Field>
            <Field label="Client key" description="PEM private key of the client certificate">
              <SecretTextArea
                id="tidemark-tls-client-key"
                rows={4}
                cols={60}
                isConfigured={!!secureJsonFields?.tlsClientKey}
                value={secure.tlsClientKey ?? ''}
                placeholder="-----BEGIN PRIVATE KEY-----"
                onReset={() => resetSecure('tlsClientKey')}
                onChange={(e: ChangeEvent<HTMLTextAreaElement>) => setSecure('tlsClientKey', e.currentTarget.value)}
              />
            </Field>
          </>
        )}
      </FieldSet>
      <FieldSet label="Traces">
        <Field
          label="Tracing datasource UID"
          description="Slowest-message trace ids link to this datasource (Tempo, Jaeger, Zipkin); empty disables the links"
        >
          <Input
            id="tidemark-tracing-uid"
            width={40}
            value={jsonData.tracingDatasourceUid ?? ''}
            placeholder="tempo"
            onChange={(e: ChangeEvent<HTMLInputElement>) => setJson('tracingDatasourceUid', e.currentTarget.value)}
          />
        </Field>
        <Field
          label="Trace URL"
          description="A tracing UI's page of one trace, with ${__value.raw} where the trace id goes; adds an 'Open in tracing UI' link"
        >
          <Input
            id="tidemark-trace-url"
            width={60}
            value={jsonData.traceUrl ?? ''}
            placeholder="http://jaeger:16686/trace/${__value.raw}"
            onChange={(e: ChangeEvent<HTMLInputElement>) => setJson('traceUrl', e.currentTarget.value)}
          />
        </Field>
      </FieldSet>
    </>
  );
}
