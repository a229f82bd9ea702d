package lagapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/tidemark/tidemark/lagexporter"
)

// Source is a cluster's lag: its latest snapshot, nil before the first poll cycle completed. A *lagexporter.Loop
// is one.
type Source interface {
	Latest() *lagexporter.Snapshot
}

// Cluster is one watched cluster as the API shows it.
type Cluster struct {
	// Name is the cluster label (the cluster path segment of the Burrow API, the cluster filter of /api/v1/lag).
	Name string
	// Brokers and PollInterval are shown by Burrow's cluster detail (servers, offset-refresh in seconds).
	Brokers      []string
	PollInterval time.Duration
	Source       Source
}

// Handler serves /api/v1/lag and Burrow's /v3/kafka endpoints from every added cluster's latest snapshot. Each
// request encodes the snapshot it read; nothing is cached and no request reaches Kafka. Safe for concurrent use.
type Handler struct {
	host string // Burrow's request.host: the name of the host that answered
	mux  *http.ServeMux

	mu       sync.RWMutex // guards clusters
	clusters []Cluster
}

// NewHandler returns a handler with no cluster yet (see Add); host is reported as request.host in Burrow's
// responses (Burrow reports its own hostname).
func NewHandler(host string) *Handler {
	h := &Handler{host: host, mux: http.NewServeMux()}
	h.mux.HandleFunc("GET /api/v1/lag", h.serveLag)
	h.mux.HandleFunc("GET /v3/kafka", h.burrowClusterList)
	h.mux.HandleFunc("GET /v3/kafka/{cluster}", h.burrowClusterDetail)
	h.mux.HandleFunc("GET /v3/kafka/{cluster}/consumer", h.burrowConsumerList)
	h.mux.HandleFunc("GET /v3/kafka/{cluster}/consumer/{group}/status", h.burrowStatus(false))
	h.mux.HandleFunc("GET /v3/kafka/{cluster}/consumer/{group}/lag", h.burrowStatus(true))
	h.mux.HandleFunc("GET /v3/kafka/{cluster}/topic", h.burrowTopicList)
	h.mux.HandleFunc("GET /v3/kafka/{cluster}/topic/{topic}", h.burrowTopicDetail)
	h.mux.HandleFunc("/v3/", func(w http.ResponseWriter, r *http.Request) {
		h.burrowError(w, r, http.StatusNotFound, "no such endpoint")
	})
	return h
}

// Add serves cluster c too; safe to call while requests are served. A name added twice replaces the first.
func (h *Handler) Add(c Cluster) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if i := slices.IndexFunc(h.clusters, func(o Cluster) bool { return o.Name == c.Name }); i >= 0 {
		h.clusters[i] = c
		return
	}
	h.clusters = append(h.clusters, c)
}

// ServeHTTP routes /api/v1/lag and /v3/...; other paths are 404.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

// list returns the clusters added so far, in Add order.
func (h *Handler) list() []Cluster {
	h.mu.RLock()
	defer h.mu.RUnlock()
	return slices.Clone(h.clusters)
}

// cluster returns the named cluster.
func (h *Handler) cluster(name string) (Cluster, bool) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	for _, c := range h.clusters {
		if c.Name == name {
			return c, true
		}
	}
	return Cluster{}, false
}

// writeJSON writes v as the response with code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, `{"error":true,"message":"could not encode JSON"}`, http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
}
