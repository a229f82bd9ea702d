package plugin

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"

	"github.com/tidemark/tidemark/internal/tlsconf/tlstest"
)

func TestLoadSettings(t *testing.T) {
	for _, tc := range []struct {
		name   string
		json   string
		secure map[string]string
		want   Settings
		err    string
	}{
		{
			name:   "defaults fill database, user and timeout",
			json:   `{"address":"clickhouse:9000"}`,
			secure: map[string]string{"password": "pw"},
			want: Settings{Address: "clickhouse:9000", Database: "tidemark", Username: "default", Password: "pw",
				QueryTimeout: 30 * time.Second},
		},
		{
			// provisioning YAML often quotes numbers
			name: "every field, timeout as a string",
			json: `{"address":" ch:9440 ","database":"tm","username":"grafana","tlsEnabled":true,"tlsSkipVerify":true,` +
				`"queryTimeoutSeconds":"45","tracingDatasourceUid":"tempo","traceUrl":"https://jaeger.example/trace/${__value.raw}"}`,
			want: Settings{Address: "ch:9440", Database: "tm", Username: "grafana", TLSEnabled: true, TLSSkipVerify: true,
				QueryTimeout: 45 * time.Second, TracingDatasourceUID: "tempo", TraceURL: "https://jaeger.example/trace/${__value.raw}"},
		},
		{name: "trace URL without the id", json: `{"address":"ch:9000","traceUrl":"http://jaeger:16686/search"}`,
			err: `Trace URL "http://jaeger:16686/search": put ${__value.raw} where the trace id goes, e.g. http://jaeger:16686/trace/${__value.raw}`},
		{name: "trace URL that is not http", json: `{"address":"ch:9000","traceUrl":"jaeger:16686/trace/${__value.raw}"}`,
			err: `Trace URL "jaeger:16686/trace/${__value.raw}": enter an http(s) URL, e.g. http://jaeger:16686/trace/${__value.raw}`},
		{name: "no address", json: `{}`,
			err: "Address is missing: enter host:port of ClickHouse's native protocol, e.g. clickhouse:9000"},
		{name: "an HTTP URL instead of the native port", json: `{"address":"http://ch:8123"}`,
			err: `Address "http://ch:8123": enter host:port of ClickHouse's native protocol (e.g. clickhouse:9000), not a URL`},
		{name: "no port", json: `{"address":"clickhouse"}`, err: `Address "clickhouse": enter host:port, e.g. clickhouse:9000`},
		{name: "port out of range", json: `{"address":"ch:99999"}`,
			err: `Address "ch:99999": port "99999" is not a number from 1 to 65535`},
		{name: "database with a dash", json: `{"address":"ch:9000","database":"tide-mark"}`,
			err: `Database "tide-mark": use letters, digits and '_', not starting with a digit`},
		{name: "timeout zero", json: `{"address":"ch:9000","queryTimeoutSeconds":0}`,
			err: `Query timeout "0": enter whole seconds from 1 to 600`},
		{name: "CA without TLS", json: `{"address":"ch:9000"}`, secure: map[string]string{"tlsCACert": "x"},
			err: "CA certificate is set but TLS is off: turn on TLS or remove the certificate"},
		{name: "CA that is not PEM", json: `{"address":"ch:9000","tlsEnabled":true}`, secure: map[string]string{"tlsCACert": "x"},
			err: "CA certificate: no PEM certificate found (paste the -----BEGIN CERTIFICATE----- block)"},
		{name: "not JSON", json: `{"address":`, err: "datasource settings are not valid JSON: unexpected end of JSON input"},
		{name: "client certificate without TLS", json: `{"address":"ch:9000"}`, secure: map[string]string{"tlsClientCert": "x", "tlsClientKey": "y"},
			err: "Client certificate is set but TLS is off: turn on TLS or remove the certificate and key"},
		{name: "client certificate without key", json: `{"address":"ch:9440","tlsEnabled":true}`, secure: map[string]string{"tlsClientCert": "x"},
			err: "Client certificate and Client key go together: set both, or neither"},
		// the parse error is not repeated: it could quote the key
		{name: "client key that is not PEM", json: `{"address":"ch:9440","tlsEnabled":true}`,
			secure: map[string]string{"tlsClientCert": "x", "tlsClientKey": "very-secret-key"},
			err:    "Client certificate / Client key: not a PEM certificate and its matching private key (paste the -----BEGIN CERTIFICATE----- and -----BEGIN PRIVATE KEY----- blocks)"},
		{name: "server name without TLS", json: `{"address":"ch:9000","tlsServerName":"ch.internal"}`,
			err: "Server name is set but TLS is off: turn on TLS or clear it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LoadSettings(backend.DataSourceInstanceSettings{JSONData: []byte(tc.json), DecryptedSecureJSONData: tc.secure})
			if tc.err != "" {
				if err == nil || err.Error() != tc.err {
					t.Fatalf("got error %v\nwant %s", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

// TestClientCertificate: a valid pair and server name reach the TLS config, and the settings print no secret.
func TestClientCertificate(t *testing.T) {
	ca := tlstest.NewCA(t, "ca")
	leaf := ca.Issue(t, "grafana", time.Hour)
	got, err := LoadSettings(backend.DataSourceInstanceSettings{
		JSONData: []byte(`{"address":"ch:9440","tlsEnabled":true,"tlsServerName":"ch.internal"}`),
		DecryptedSecureJSONData: map[string]string{"password": "pw-secret-42", "tlsCACert": string(ca.PEM),
			"tlsClientCert": string(leaf.CertPEM), "tlsClientKey": string(leaf.KeyPEM)}})
	if err != nil {
		t.Fatal(err)
	}
	c := got.tlsConfig()
	if len(c.Certificates) != 1 || c.ServerName != "ch.internal" || c.RootCAs == nil {
		t.Fatalf("tls config %+v", c)
	}
	dump := fmt.Sprintf("%v %+v %#v", got, got, got)
	if strings.Contains(dump, "pw-secret-42") || strings.Contains(dump, "PRIVATE KEY") {
		t.Fatalf("settings print a secret: %s", dump)
	}
}

func TestTLSConfig(t *testing.T) {
	s := Settings{TLSEnabled: true, TLSSkipVerify: true}
	if c := s.tlsConfig(); c == nil || !c.InsecureSkipVerify {
		t.Fatalf("got %+v", c)
	}
	if (Settings{}).tlsConfig() != nil {
		t.Fatal("TLS off must give a nil config")
	}
}
