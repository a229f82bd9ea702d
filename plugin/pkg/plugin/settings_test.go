package plugin

import (
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
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

func TestTLSConfig(t *testing.T) {
	s := Settings{TLSEnabled: true, TLSSkipVerify: true}
	if c := s.tlsConfig(); c == nil || !c.InsecureSkipVerify {
		t.Fatalf("got %+v", c)
	}
	if (Settings{}).tlsConfig() != nil {
		t.Fatal("TLS off must give a nil config")
	}
}
