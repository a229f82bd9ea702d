package promexport

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	. "github.com/tidemark/tidemark/lagexporter"
)

// prometheusAccept is the Accept header Prometheus 2.x and 3.x send by default: OpenMetrics preferred.
const prometheusAccept = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"

// scrapeHandler GETs h with the given Accept and Accept-Encoding headers and returns the content type and the
// decoded body.
func scrapeHandler(t *testing.T, h *Handler, accept, enc string) (string, string) {
	t.Helper()
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Accept", accept)
	req.Header.Set("Accept-Encoding", enc)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	body := rec.Body.Bytes()
	if rec.Header().Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if body, err = io.ReadAll(zr); err != nil {
			t.Fatal(err)
		}
	} else if enc == "gzip" {
		t.Fatal("gzip asked for, not served")
	}
	return rec.Header().Get("Content-Type"), string(body)
}

// normalize sorts an exposition's lines and writes every sample value in one float notation ("1" and "1.0" are the
// same number), so that two writers' outputs compare by content; "# EOF" must be the last line.
func normalize(t *testing.T, text string, om bool) []string {
	t.Helper()
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if om {
		if lines[len(lines)-1] != "# EOF" {
			t.Fatalf("OpenMetrics exposition does not end with # EOF:\n...%s", text[max(0, len(text)-300):])
		}
		lines = lines[:len(lines)-1]
	}
	for i, l := range lines {
		if strings.HasPrefix(l, "#") {
			continue
		}
		sp := strings.LastIndexByte(l, ' ')
		v, err := strconv.ParseFloat(l[sp+1:], 64)
		if err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		lines[i] = l[:sp+1] + strconv.FormatFloat(v, 'g', -1, 64)
	}
	slices.Sort(lines)
	return lines
}

// libraryExposition renders c through a registry and client_golang's own encoder in format.
func libraryExposition(t *testing.T, c prometheus.Collector, format expfmt.Format) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, format)
	for _, mf := range mfs {
		if err := enc.Encode(mf); err != nil {
			t.Fatal(err)
		}
	}
	if cl, ok := enc.(expfmt.Closer); ok {
		_ = cl.Close()
	}
	return b.String()
}

// TestHandlerFormatsMatchLibrary: for every case timeline and both granularities, what the handler serves in each
// negotiated format (OpenMetrics 1.0 to Prometheus, the text format to a plain client), gzip or not, holds exactly
// the lines client_golang's own encoder writes for the same Collector in that format: HELP escaping, counter
// naming, # EOF.
func TestHandlerFormatsMatchLibrary(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(caseDir, "c*.jsonl"))
	if len(files) == 0 {
		t.Fatal("no case timelines")
	}
	for _, file := range files {
		for _, mut := range []func(*Config){nil, func(c *Config) { c.Granularity = GranularityTopic; c.KafkaExporterCompat = true }} {
			c, _ := caseCollector(t, filepath.Base(file), 0, mut)
			h := NewHandler(c, nil)
			for _, tc := range []struct {
				accept string
				format expfmt.Format
			}{{prometheusAccept, expfmt.FmtOpenMetrics_1_0_0}, {"", expfmt.FmtText}, {"text/plain", expfmt.FmtText}} {
				om := tc.format.FormatType() == expfmt.TypeOpenMetrics
				want := normalize(t, libraryExposition(t, c, tc.format), om)
				for _, enc := range []string{"", "gzip"} {
					ct, body := scrapeHandler(t, h, tc.accept, enc)
					if !strings.HasPrefix(ct, strings.Split(string(tc.format), ";")[0]) {
						t.Fatalf("%s Accept %q: content type %q, want %s", file, tc.accept, ct, tc.format)
					}
					if got := normalize(t, body, om); !slices.Equal(got, want) {
						t.Fatalf("%s Accept %q %s: served exposition differs from the library's:\n%s\n---\n%s", file,
							tc.accept, enc, strings.Join(got, "\n"), strings.Join(want, "\n"))
					}
				}
			}
		}
	}
}

// TestHandlerServesExtraWithExemplars: Extra's families (the process's other metrics) are in the same response, with
// their exemplars when OpenMetrics is negotiated, before the one final # EOF.
func TestHandlerServesExtraWithExemplars(t *testing.T) {
	c, _ := caseCollector(t, "c06_no_commit.jsonl", 0, nil)
	reg := prometheus.NewRegistry()
	hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tidemark_e2e_latency_seconds", Help: "e2e",
		Buckets: []float64{0.25}})
	reg.MustRegister(hist)
	hist.(prometheus.ExemplarObserver).ObserveWithExemplar(0.12, prometheus.Labels{"trace_id": "0af7651916cd43dd8448eb211c80319c"})
	h := NewHandler(c, reg)
	for _, enc := range []string{"", "gzip"} {
		_, body := scrapeHandler(t, h, prometheusAccept, enc)
		want := `tidemark_e2e_latency_seconds_bucket{le="0.25"} 1 # {trace_id="0af7651916cd43dd8448eb211c80319c"} 0.12`
		if !strings.Contains(body, want) || !strings.Contains(body, `tidemark_lag_group_offsets{cluster="test",group="g"} 3083`) {
			t.Fatalf("%q OpenMetrics scrape lacks the exemplar or the lag:\n%s", enc, body)
		}
		if strings.Count(body, "# EOF") != 1 || !strings.HasSuffix(body, "# EOF\n") {
			t.Fatalf("%q: want exactly one final # EOF", enc)
		}
		_, text := scrapeHandler(t, h, "text/plain", enc)
		if !strings.Contains(text, `tidemark_e2e_latency_seconds_bucket{le="0.25"} 1`) || strings.Contains(text, "# EOF") ||
			!strings.Contains(text, "# TYPE tidemark_lag_exporter_cycles_total counter") {
			t.Fatalf("%q text scrape:\n%s", enc, text)
		}
	}
}

func TestAcceptsGzip(t *testing.T) {
	for v, want := range map[string]bool{"gzip": true, "GZIP": true, "deflate, gzip;q=0.5": true, "br": false, "": false,
		"gzip;q=0": false, "gzip;q=0.0, identity": false, "identity, gzip; q=0.001": true} {
		if got := acceptsGzip(v); got != want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", v, got, want)
		}
	}
}

// TestHandlerSeveralClusters: one handler serving two clusters' Collectors (different granularities, one with the
// kafka_exporter names) holds exactly the lines client_golang writes when it gathers both, each family once with
// both clusters' series, in every format, gzip or not; a Collector added later is in the next scrape.
func TestHandlerSeveralClusters(t *testing.T) {
	a, _ := caseCollector(t, "c06_no_commit.jsonl", 0, func(c *Config) { c.Cluster = "prod" })
	b, _ := caseCollector(t, "c06_no_commit.jsonl", 0, func(c *Config) {
		c.Cluster = "dr"
		c.Granularity = GranularityTopic
		c.KafkaExporterCompat = true
	})
	h := NewHandler(a, nil)
	if _, body := scrapeHandler(t, h, "", ""); strings.Contains(body, `cluster="dr"`) || !strings.Contains(body, `cluster="prod"`) {
		t.Fatalf("before Add: want prod's series only:\n%s", body)
	}
	h.Add(b)
	regA, regB := prometheus.NewPedanticRegistry(), prometheus.NewPedanticRegistry()
	regA.MustRegister(a)
	regB.MustRegister(b)
	mfs, err := prometheus.Gatherers{regA, regB}.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		accept string
		format expfmt.Format
	}{{prometheusAccept, expfmt.FmtOpenMetrics_1_0_0}, {"text/plain", expfmt.FmtText}} {
		om := tc.format.FormatType() == expfmt.TypeOpenMetrics
		var lib bytes.Buffer
		enc := expfmt.NewEncoder(&lib, tc.format)
		for _, mf := range mfs {
			if err := enc.Encode(mf); err != nil {
				t.Fatal(err)
			}
		}
		if cl, ok := enc.(expfmt.Closer); ok {
			_ = cl.Close()
		}
		want := normalize(t, lib.String(), om)
		for _, encoding := range []string{"", "gzip"} {
			_, body := scrapeHandler(t, h, tc.accept, encoding)
			if got := normalize(t, body, om); !slices.Equal(got, want) {
				t.Fatalf("%s %s: served exposition differs from the library's:\n%s\n---\n%s", tc.format, encoding,
					strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			// the text parser rejects a family whose HELP/TYPE lines appear twice
			if !om {
				tp := expfmt.NewTextParser(model.UTF8Validation)
				if _, err := tp.TextToMetricFamilies(strings.NewReader(body)); err != nil {
					t.Fatalf("%s: not a valid text exposition: %v", encoding, err)
				}
			}
		}
	}
}
