package promexport

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	. "github.com/tidemark/tidemark/lagexporter"
)

// bigSnapshot builds a snapshot of groups × partitions group-partitions through the Evaluator.
func bigSnapshot(tb testing.TB, groups, parts int) (*Config, *Snapshot) {
	cfg := &Config{Cluster: "bench"}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		tb.Fatal(err)
	}
	obs := &Observation{Time: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	const topics = 10
	for t := range topics {
		to := TopicObservation{Topic: fmt.Sprintf("topic-%d", t), ID: fmt.Sprint(t)}
		for p := range parts {
			to.Partitions = append(to.Partitions, PartitionObservation{Partition: int32(p), LogStart: 0, HighWatermark: 1000, LastStable: 1000})
		}
		obs.Topics = append(obs.Topics, to)
	}
	for g := range groups {
		gr := GroupObservation{Group: fmt.Sprintf("group-%05d", g), State: "Empty"}
		for p := range parts {
			gr.Offsets = append(gr.Offsets, CommittedOffset{Topic: fmt.Sprintf("topic-%d", g%topics), Partition: int32(p), Offset: int64((g + p) % 1000)})
		}
		obs.Groups = append(obs.Groups, gr)
	}
	return cfg, NewEvaluator(cfg).Apply(obs)
}

func BenchmarkScrape(b *testing.B) {
	cfg, snap := bigSnapshot(b, 5000, 20)
	reg := prometheus.NewRegistry()
	reg.MustRegister(NewCollector(cfg, fixedSource{snap}))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	b.ResetTimer()
	for range b.N {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		b.ReportMetric(float64(n), "bytes")
	}
}

func BenchmarkEvaluate(b *testing.B) {
	for range b.N {
		bigSnapshot(b, 5000, 20)
	}
}

// seqSource bumps the snapshot sequence on every Latest, so every scrape renders anew (the worst case).
type seqSource struct{ s *Snapshot }

func (f *seqSource) Latest() *Snapshot { cp := *f.s; f.s = &cp; cp.Seq++; return &cp }
func (f *seqSource) Health() Health    { return fixedSource{}.Health() }

// BenchmarkScrapeHandler measures a scrape of the pre-rendering Handler at 100,000 group-partitions: render and
// render-gzip render anew on every scrape (the cost of one rendering once the buffers of the last ones exist: the
// steady state), first-render-gzip is a new Handler's first scrape (the cold rendering behind the first complete
// scrape of a starting process), cached-gzip copies the finished rendering.
func BenchmarkScrapeHandler(b *testing.B) {
	cfg, snap := bigSnapshot(b, 5000, 20)
	for _, tc := range []struct {
		name  string
		src   SnapshotSource
		gz    bool
		first bool
	}{{"render", &seqSource{snap}, false, false}, {"render-gzip", &seqSource{snap}, true, false},
		{"first-render-gzip", fixedSource{snap}, true, true}, {"cached-gzip", fixedSource{snap}, true, false}} {
		b.Run(tc.name, func(b *testing.B) {
			h := NewHandler(NewCollector(cfg, tc.src), nil)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
			defer srv.Close()
			tr := &http.Transport{DisableCompression: true}
			cl := &http.Client{Transport: tr}
			get := func() {
				req, _ := http.NewRequest("GET", srv.URL, nil)
				if tc.gz {
					req.Header.Set("Accept-Encoding", "gzip")
				}
				resp, err := cl.Do(req)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				b.ReportMetric(float64(n), "bytes")
			}
			if !tc.first {
				get() // the two expositions' buffers: the one served and the spare the next rendering reuses
				get()
			}
			b.ResetTimer()
			for range b.N {
				if tc.first {
					h = NewHandler(NewCollector(cfg, tc.src), nil)
				}
				get()
			}
		})
	}
}
