package plugin

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	"github.com/grafana/grafana-plugin-sdk-go/backend/instancemgmt"

	"github.com/tidemark/tidemark/internal/store/query"
)

// ID is the plugin id in plugin.json.
const ID = "tidemark-kafka-datasource"

// Datasource is one configured Tidemark datasource. Grafana creates it when the settings change and disposes the
// previous one.
type Datasource struct {
	settings    Settings
	settingsErr error            // settings that did not validate: every call reports it
	now         func() time.Time // the clock resources' "recently seen" window is measured on

	mu     sync.Mutex    // guards reader
	reader *query.Reader // opened on first use and kept while it works; nil until then
}

var (
	_ backend.QueryDataHandler      = (*Datasource)(nil)
	_ backend.CheckHealthHandler    = (*Datasource)(nil)
	_ backend.CallResourceHandler   = (*Datasource)(nil)
	_ instancemgmt.InstanceDisposer = (*Datasource)(nil)
)

// NewDatasource is the instance factory datasource.Manage calls. It never fails: settings that do not validate are
// kept as an error that CheckHealth and every query report, so the user sees what to fix instead of a generic
// "plugin failed to start".
func NewDatasource(_ context.Context, s backend.DataSourceInstanceSettings) (instancemgmt.Instance, error) {
	return NewDatasourceWithClock(s, time.Now), nil
}

// NewDatasourceWithClock is NewDatasource with the clock injected (tests).
func NewDatasourceWithClock(s backend.DataSourceInstanceSettings, now func() time.Time) *Datasource {
	settings, err := LoadSettings(s)
	return &Datasource{settings: settings, settingsErr: err, now: now}
}

// Dispose closes the connection pool.
func (d *Datasource) Dispose() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reader != nil {
		_ = d.reader.Close()
		d.reader = nil
	}
}

// open returns the shared reader, connecting and checking the schema version on first use.
func (d *Datasource) open(ctx context.Context) (*query.Reader, error) {
	if d.settingsErr != nil {
		return nil, &userError{status: backend.StatusBadRequest, msg: "datasource settings: " + d.settingsErr.Error()}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.reader != nil {
		return d.reader, nil
	}
	r, err := query.Open(ctx, d.settings.readerConfig())
	if err != nil {
		return nil, err
	}
	if _, err := r.CheckSchema(ctx); err != nil {
		_ = r.Close()
		return nil, err
	}
	d.reader = r
	return r, nil
}

// CheckHealth connects with the settings and checks that the database holds the schema version this plugin reads.
func (d *Datasource) CheckHealth(ctx context.Context, _ *backend.CheckHealthRequest) (*backend.CheckHealthResult, error) {
	if d.settingsErr != nil {
		return &backend.CheckHealthResult{Status: backend.HealthStatusError, Message: d.settingsErr.Error()}, nil
	}
	r, err := query.Open(ctx, d.settings.readerConfig())
	if err != nil {
		_, _, msg := explain(err, d.settings)
		return &backend.CheckHealthResult{Status: backend.HealthStatusError, Message: msg}, nil
	}
	defer r.Close()
	version, err := r.CheckSchema(ctx)
	if err != nil {
		_, _, msg := explain(err, d.settings)
		return &backend.CheckHealthResult{Status: backend.HealthStatusError, Message: msg}, nil
	}
	server, err := r.ServerVersion(ctx)
	if err != nil {
		server = "unknown version"
	}
	return &backend.CheckHealthResult{
		Status: backend.HealthStatusOk,
		Message: fmt.Sprintf("Connected to ClickHouse %s at %s; database %q has Tidemark schema version %d",
			server, d.settings.Address, d.settings.Database, version),
	}, nil
}

// QueryData answers each query independently: one query's error does not fail the others.
func (d *Datasource) QueryData(ctx context.Context, req *backend.QueryDataRequest) (*backend.QueryDataResponse, error) {
	resp := backend.NewQueryDataResponse()
	r, openErr := d.open(ctx)
	for _, q := range req.Queries {
		if openErr != nil {
			resp.Responses[q.RefID] = errorResponse(openErr, d.settings)
			continue
		}
		resp.Responses[q.RefID] = d.query(ctx, r, q)
	}
	return resp, nil
}

// query runs one query; a panic in frame building is reported as a plugin error, not a crashed process.
func (d *Datasource) query(ctx context.Context, r *query.Reader, dq backend.DataQuery) (res backend.DataResponse) {
	defer func() {
		if p := recover(); p != nil {
			res = backend.ErrDataResponseWithSource(backend.StatusInternal, backend.ErrorSourcePlugin,
				fmt.Sprintf("Tidemark plugin error: %v", p))
		}
	}()
	pq, err := ParseQuery(dq.JSON, dq.QueryType)
	if err != nil {
		return errorResponse(badRequest(err), d.settings)
	}
	frames, err := run(ctx, r, pq, window(dq), d.settings)
	if err != nil {
		return errorResponse(err, d.settings)
	}
	return backend.DataResponse{Frames: frames}
}

// MaxPoints bounds the buckets of a time series when Grafana sends no MaxDataPoints (alerting sends its own).
const MaxPoints = 1500

// window turns Grafana's time range, interval and point budget into a query window: buckets are the panel's
// interval, widened so the range holds at most MaxDataPoints of them, and at least one second.
func window(dq backend.DataQuery) query.Window {
	from, to := dq.TimeRange.From.UTC(), dq.TimeRange.To.UTC()
	step := dq.Interval
	maxPts := dq.MaxDataPoints
	if maxPts <= 0 {
		maxPts = MaxPoints
	}
	if span := to.Sub(from); span > 0 {
		if min := span / time.Duration(maxPts); step < min {
			step = min
		}
	}
	step = (step + time.Second - 1).Truncate(time.Second) // whole seconds, rounded up
	if step < time.Second {
		step = time.Second
	}
	return query.Window{From: from, To: to, Step: step}
}
