package plugin

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"

	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/store/query"
)

func TestExplain(t *testing.T) {
	s := Settings{Address: "ch:9000", Database: "tidemark", Username: "grafana", QueryTimeout: 30 * time.Second}
	for _, tc := range []struct {
		name   string
		err    error
		status backend.Status
		source backend.ErrorSource
		msg    string
	}{
		{"reader's bad input", fmt.Errorf("stage %q: want one of …: %w", "x", query.ErrBadInput), backend.StatusBadRequest,
			backend.ErrorSourceDownstream, `stage "x": want one of …`},
		// a refused login is the user's to fix, and not 401, which Grafana's frontend reads as its own session ending
		{"refused login", fmt.Errorf("connect: %w", query.ErrAuth), backend.StatusBadRequest, backend.ErrorSourceDownstream,
			`ClickHouse at ch:9000 refused user "grafana": check the user and password in the datasource settings`},
		{"timeout", fmt.Errorf("query: %w", context.DeadlineExceeded), backend.StatusTimeout, backend.ErrorSourceDownstream,
			"the query ran longer than the datasource's query timeout (30s): narrow the time range or the filters, or raise the timeout"},
		{"newer schema", fmt.Errorf("schema version 3, this build reads 1: %w", store.ErrSchemaNewer), backend.StatusBadRequest,
			backend.ErrorSourceDownstream, `database "tidemark" was migrated by a newer Tidemark (schema version 3, this build reads 1): upgrade this plugin`},
		{"no grant", fmt.Errorf("query: %w: %w", query.ErrAccessDenied, errors.New("code: 497, message: grafana: Not enough privileges")),
			backend.StatusForbidden, backend.ErrorSourceDownstream,
			`ClickHouse user "grafana" may not read database "tidemark": grant it SELECT on the database (code: 497, message: grafana: Not enough privileges)`},
		// anything unrecognised is this plugin's own failure
		{"plugin bug", errors.New("frame has 3 fields, want 2"), backend.StatusInternal, backend.ErrorSourcePlugin,
			"Tidemark plugin error: frame has 3 fields, want 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, src, msg := explain(tc.err, s)
			if status != tc.status || src != tc.source || msg != tc.msg {
				t.Fatalf("got %d %s %q\nwant %d %s %q", status, src, msg, tc.status, tc.source, tc.msg)
			}
		})
	}
}

func TestSettingsErrorReportedByEveryCall(t *testing.T) {
	d := NewDatasourceWithClock(backend.DataSourceInstanceSettings{JSONData: []byte(`{}`)}, time.Now)
	res, err := d.CheckHealth(context.Background(), &backend.CheckHealthRequest{})
	if err != nil || res.Status != backend.HealthStatusError ||
		res.Message != "Address is missing: enter host:port of ClickHouse's native protocol, e.g. clickhouse:9000" {
		t.Fatalf("health: %v %+v", err, res)
	}
	resp, err := d.QueryData(context.Background(), &backend.QueryDataRequest{Queries: []backend.DataQuery{{RefID: "A"}}})
	if err != nil {
		t.Fatal(err)
	}
	r := resp.Responses["A"]
	if r.Error == nil || r.ErrorSource != backend.ErrorSourceDownstream ||
		r.Error.Error() != "datasource settings: Address is missing: enter host:port of ClickHouse's native protocol, e.g. clickhouse:9000" {
		t.Fatalf("query: %+v", r)
	}
}
