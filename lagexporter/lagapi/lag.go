package lagapi

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tidemark/tidemark/lagexporter"
)

// LagResponse is the body of GET /api/v1/lag.
type LagResponse struct {
	// Clusters are the clusters asked about, in configuration order, with their snapshot's identity.
	Clusters []ClusterSnapshot `json:"clusters"`
	// Groups are the matching groups of every cluster asked about, clusters in configuration order, each cluster's
	// groups in its snapshot's order (by name).
	Groups []ClusterGroup `json:"groups"`
}

// ClusterSnapshot identifies the snapshot a cluster's groups come from.
type ClusterSnapshot struct {
	Cluster string `json:"cluster"`
	// Time is the snapshot's observation time (the "now" of its time lags); absent before the first poll cycle.
	Time *time.Time `json:"time,omitempty"`
	// Seq is the snapshot's cycle number, 0 before the first poll cycle.
	Seq uint64 `json:"seq"`
	// Message says why the cluster has no snapshot yet.
	Message string `json:"message,omitempty"`
	// Errors are the parts the snapshot's cycle could not read (as in `tidemark lag -o json`).
	Errors []lagexporter.CycleError `json:"errors,omitempty"`
}

// ClusterGroup is one group of one cluster: the cluster name and every field of the group in `tidemark lag -o json`.
type ClusterGroup struct {
	Cluster string `json:"cluster"`
	*lagexporter.GroupLag
}

// lagFilter is the query of GET /api/v1/lag: each parameter may be repeated (any value matches), an absent one
// matches everything.
type lagFilter struct {
	clusters, groups []string
	statuses         []lagexporter.Status
}

// parseLagFilter reads cluster=, group= and status= (a Tidemark status name, any case); any other parameter is an
// error, so a misspelt filter is not silently ignored.
func parseLagFilter(r *http.Request) (lagFilter, error) {
	var f lagFilter
	for k, vs := range r.URL.Query() {
		switch k {
		case "cluster":
			f.clusters = append(f.clusters, vs...)
		case "group":
			f.groups = append(f.groups, vs...)
		case "status":
			for _, v := range vs {
				i := slices.Index(lagexporter.StatusNames, strings.ToUpper(v))
				if i < 0 {
					return f, fmt.Errorf("status %q is not one of %s", v, strings.Join(lagexporter.StatusNames, ", "))
				}
				f.statuses = append(f.statuses, lagexporter.Status(i))
			}
		default:
			return f, fmt.Errorf("unknown parameter %q: the filters are cluster, group and status", k)
		}
	}
	return f, nil
}

func (f *lagFilter) matchGroup(g *lagexporter.GroupLag) bool {
	return len(f.groups) == 0 || slices.Contains(f.groups, g.Group)
}

func (f *lagFilter) matchStatus(g *lagexporter.GroupLag) bool {
	return len(f.statuses) == 0 || slices.Contains(f.statuses, g.Status)
}

// apiError is the body of an /api/v1 error.
type apiError struct {
	Error string `json:"error"`
}

// serveLag is GET /api/v1/lag. 400 for a bad filter, 404 for a cluster not watched or (with group=) when no group
// asked for exists in a cluster that has a snapshot, 503 when no cluster asked about has a snapshot yet.
func (h *Handler) serveLag(w http.ResponseWriter, r *http.Request) {
	f, err := parseLagFilter(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, apiError{err.Error()})
		return
	}
	all := h.list()
	for _, name := range f.clusters {
		if !slices.ContainsFunc(all, func(c Cluster) bool { return c.Name == name }) {
			writeJSON(w, http.StatusNotFound, apiError{fmt.Sprintf("no cluster %q", name)})
			return
		}
	}
	resp := LagResponse{Clusters: []ClusterSnapshot{}, Groups: []ClusterGroup{}}
	pending := 0   // clusters asked about without a snapshot yet
	found := false // some group matched the group filter, whatever its status
	for _, c := range all {
		if len(f.clusters) > 0 && !slices.Contains(f.clusters, c.Name) {
			continue
		}
		s := c.Source.Latest()
		if s == nil {
			pending++
			resp.Clusters = append(resp.Clusters, ClusterSnapshot{Cluster: c.Name, Message: "no poll cycle has completed yet"})
			continue
		}
		t := s.Time
		resp.Clusters = append(resp.Clusters, ClusterSnapshot{Cluster: c.Name, Time: &t, Seq: s.Seq, Errors: s.Errors})
		for i := range s.Groups {
			if !f.matchGroup(&s.Groups[i]) {
				continue
			}
			found = true
			if f.matchStatus(&s.Groups[i]) {
				resp.Groups = append(resp.Groups, ClusterGroup{Cluster: c.Name, GroupLag: &s.Groups[i]})
			}
		}
	}
	switch {
	case pending > 0 && pending == len(resp.Clusters):
		writeJSON(w, http.StatusServiceUnavailable, apiError{"no poll cycle has completed yet"})
	case len(f.groups) > 0 && !found && pending == 0:
		writeJSON(w, http.StatusNotFound, apiError{fmt.Sprintf("no group %s", strings.Join(f.groups, ", "))})
	default:
		writeJSON(w, http.StatusOK, resp)
	}
}
