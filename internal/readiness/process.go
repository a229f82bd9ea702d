package readiness

import (
	"fmt"
	"net/http"
	"strings"
)

// Entry is one cluster's part of a Process: its name (the clusters[].name) and its State.
type Entry struct {
	Name  string
	State *State
}

// Process is /readyz: the process's own state (starting, connecting to ClickHouse, stopping), then every cluster's
// entry. With one cluster its reason is the answer. With several, the process is ready while at least one cluster
// is, and the body names every cluster not ready and why: one cluster down must not make Kubernetes take the pod out
// of its Service (a Prometheus ServiceMonitor scrapes only ready endpoints), which would blind the others.
// ?cluster=NAME answers for that cluster alone (503 when it is not ready, 404 for no such cluster).
type Process struct {
	State   State
	Entries []Entry
	Summary string // what the process runs: the last line of every body, "runs: <Summary>", when not empty
}

// ServeHTTP answers /readyz: 200 with the body when ready, else the code of Status with the body as the error.
func (p *Process) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	code, body := p.Status(r.URL.Query().Get("cluster"))
	if p.Summary != "" {
		body += "runs: " + p.Summary + "\n"
	}
	if code != http.StatusOK {
		http.Error(w, body, code)
		return
	}
	_, _ = w.Write([]byte(body))
}

// Status is /readyz's HTTP status code and body, without the summary line; only, when not empty, names the one
// cluster asked about.
func (p *Process) Status(only string) (int, string) {
	if why := p.State.NotReady(); why != "" {
		return http.StatusServiceUnavailable, "not ready: " + why + "\n"
	}
	if only != "" {
		return p.one(only)
	}
	if len(p.Entries) == 1 {
		if why := p.Entries[0].State.NotReady(); why != "" {
			return http.StatusServiceUnavailable, "not ready: " + why + "\n"
		}
		return http.StatusOK, "ready\n"
	}
	var b strings.Builder
	up := 0
	for _, e := range p.Entries {
		if why := e.State.NotReady(); why != "" {
			fmt.Fprintf(&b, "cluster %s: not ready: %s\n", e.Name, why)
		} else {
			up++
			fmt.Fprintf(&b, "cluster %s: ready\n", e.Name)
		}
	}
	switch up {
	case 0:
		return http.StatusServiceUnavailable, "not ready: no cluster is ready\n" + b.String()
	case len(p.Entries):
		return http.StatusOK, "ready\n" + b.String()
	}
	return http.StatusOK, fmt.Sprintf("ready: %d of %d clusters\n", up, len(p.Entries)) + b.String()
}

// one is Status for the cluster named name alone.
func (p *Process) one(name string) (int, string) {
	for _, e := range p.Entries {
		if e.Name == name {
			if why := e.State.NotReady(); why != "" {
				return http.StatusServiceUnavailable, "cluster " + name + ": not ready: " + why + "\n"
			}
			return http.StatusOK, "cluster " + name + ": ready\n"
		}
	}
	return http.StatusNotFound, fmt.Sprintf("no cluster %q\n", name)
}
