package store

import (
	"os"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestConfigDefaults(t *testing.T) {
	var c Config
	c.SetDefaults()
	want := Config{
		Addr: []string{"127.0.0.1:9000"}, Database: "tidemark", User: "default", Dialect: "auto",
		DialTimeout: 5 * time.Second, MaxExecutionTime: 60 * time.Second, RetentionDays: 14, RollupRetentionDays: 90,
		Writer: WriterConfig{BatchRows: 50000, FlushInterval: time.Second, MaxRows: 200000, MaxBytes: 64 << 20,
			DedupWindow: 1 << 18, RetryInitial: 100 * time.Millisecond, RetryMax: 10 * time.Second,
			InsertTimeout: 60 * time.Second, StallTimeout: 30 * time.Second},
	}
	if c.Addr[0] != want.Addr[0] || len(c.Addr) != 1 {
		t.Fatalf("Addr %v", c.Addr)
	}
	c.Addr, want.Addr = nil, nil
	if !reflect.DeepEqual(c, want) {
		t.Errorf("defaults\n got %+v\nwant %+v", c, want)
	}
	c.Addr = []string{"x:9000"}
	if err := c.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string // substring of the error; "" for valid
	}{
		{"defaults", func(*Config) {}, ""},
		{"empty address", func(c *Config) { c.Addr = []string{""} }, "addr"},
		// The database name is spliced into CREATE DATABASE: only identifiers pass.
		{"database with a quote", func(c *Config) { c.Database = "x; DROP" }, "database"},
		{"database starting with a digit", func(c *Config) { c.Database = "1db" }, "database"},
		{"unknown dialect", func(c *Config) { c.Dialect = "new" }, "auto, legacy, modern"},
		{"sub-second max_execution_time", func(c *Config) { c.MaxExecutionTime = time.Millisecond }, "max_execution_time"},
		{"zero retention after defaults", func(c *Config) { c.RetentionDays = -1 }, "retention_days"},
		// MaxRows below a batch would block every Write that fills a batch.
		{"max_rows below batch_rows", func(c *Config) { c.Writer.MaxRows = 10 }, "writer.max_rows"},
		{"retry_max below retry_initial", func(c *Config) { c.Writer.RetryMax = time.Millisecond }, "writer.retry_initial"},
		{"sub-second stall_timeout", func(c *Config) { c.Writer.StallTimeout = time.Millisecond }, "writer.stall_timeout"},
		// Every bad key is reported, each once with its own key, not only the first.
		{"two bad keys", func(c *Config) { c.RetentionDays, c.Writer.BatchRows = -1, -1 },
			"retention_days -1: must be at least 1\nwriter.batch_rows -1: must be at least 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Config
			c.SetDefaults()
			tt.mod(&c)
			err := c.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("unexpected error %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("error %v, want one naming %q", err, tt.want)
			}
		})
	}
}

// TestMetricsDocumented keeps docs/schema.md's metric table and the registry in agreement.
func TestMetricsDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/schema.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("`(tidemark_store_(?:writer|rollup)_[a-z_]+)").FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
	}
	reg := prometheus.NewRegistry()
	m, err := newWriterMetrics(reg, func() float64 { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	m.insertSeconds.WithLabelValues(TableLatency).Observe(0.1) // a vec without children is not gathered
	if _, err := NewRollupRepairer(nil, 0, 0, reg, nil); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var registered []string
	for _, mf := range mfs {
		registered = append(registered, mf.GetName())
		if !documented[mf.GetName()] {
			t.Errorf("metric %s is not documented in docs/schema.md", mf.GetName())
		}
		delete(documented, mf.GetName())
	}
	for name := range documented {
		t.Errorf("docs/schema.md documents %s, which the writer does not register", name)
	}
	sort.Strings(registered)
	if len(registered) != 15 {
		t.Errorf("registered %v", registered)
	}
}
