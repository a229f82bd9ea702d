package plugin_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"

	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/store/query/querytest"
	"github.com/tidemark/tidemark/internal/testenv"
	"github.com/tidemark/tidemark/internal/tlsconf/tlstest"
)

// TestSecureClickHouse: the datasource reaches ClickHouse's secure port with the CA, a client certificate and key
// and a password, all secure settings; each missing or wrong piece gives a message naming what to fix, as a
// downstream error, and no message contains the password or the key.
func TestSecureClickHouse(t *testing.T) {
	s := testenv.SecureStack(t)
	db, _ := testenv.ClickHouseDB(t)
	querytest.Schema(t, db)
	certPath, keyPath := s.ClientCert()
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	ca, cert, key := read(s.CA()), read(certPath), read(keyPath)
	c := served(t)
	settings := func(secure map[string]string, js map[string]any) *backend.DataSourceInstanceSettings {
		base := map[string]any{"address": s.ClickHouseSecureAddr, "database": db, "username": "tidemark", "tlsEnabled": true}
		for k, v := range js {
			base[k] = v
		}
		raw, _ := json.Marshal(base)
		sec := map[string]string{"password": testenv.SecureClickHousePW, "tlsCACert": ca, "tlsClientCert": cert, "tlsClientKey": key}
		for k, v := range secure {
			sec[k] = v
		}
		return &backend.DataSourceInstanceSettings{ID: 1, UID: fmt.Sprintf("tls-%d", uid.Add(1)), Name: "Tidemark",
			JSONData: raw, Updated: time.Now(), DecryptedSecureJSONData: sec}
	}
	check := func(st *backend.DataSourceInstanceSettings) *backend.CheckHealthResult {
		t.Helper()
		res, err := c.CheckHealth(ctx(t), &backend.CheckHealthRequest{PluginContext: pctx(st)})
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{"PRIVATE KEY", "wrong-password-123"} {
			if strings.Contains(res.Message, secret) {
				t.Fatalf("health message leaks %q: %s", secret, res.Message)
			}
		}
		return res
	}
	other := string(tlstest.NewCA(t, "other").PEM)
	for _, tc := range []struct {
		name   string
		secure map[string]string
		js     map[string]any
		want   string // prefix of the message
	}{
		{name: "no client certificate", secure: map[string]string{"tlsClientCert": "", "tlsClientKey": ""},
			want: "ClickHouse at " + s.ClickHouseSecureAddr + " refused the TLS handshake"},
		{name: "untrusted server", secure: map[string]string{"tlsCACert": other},
			want: "ClickHouse at " + s.ClickHouseSecureAddr + " presented a certificate this datasource does not trust"},
		{name: "wrong password", secure: map[string]string{"password": "wrong-password-123"},
			want: "ClickHouse at " + s.ClickHouseSecureAddr + ` refused user "tidemark"`},
		{name: "wrong server name", js: map[string]any{"tlsServerName": "not-clickhouse.example"},
			want: "ClickHouse at " + s.ClickHouseSecureAddr + " presented a certificate this datasource does not trust"},
	} {
		if res := check(settings(tc.secure, tc.js)); res.Status != backend.HealthStatusError || !strings.HasPrefix(res.Message, tc.want) {
			t.Errorf("%s: got %v %q\nwant prefix %q", tc.name, res.Status, res.Message, tc.want)
		}
	}
	want := fmt.Sprintf("Connected to ClickHouse 18.16.1 at %s; database %q has Tidemark schema version %d",
		s.ClickHouseSecureAddr, db, store.CurrentSchemaVersion)
	if res := check(settings(nil, nil)); res.Status != backend.HealthStatusOk || res.Message != want {
		t.Fatalf("over TLS with a client certificate: %v %q, want %q", res.Status, res.Message, want)
	}
}
