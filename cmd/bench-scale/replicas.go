package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark/tidemark/internal/benchproc"
)

func (s *stage) newCluster(name string, brokers []string) *kcluster {
	t := "bs-" + s.id + "-" + name + "-"
	return &kcluster{name: name, brokers: brokers, orders: t + "orders", receipts: t + "receipts", probe: t + "probe",
		prefix: s.prefix + name + "-", appGroup: s.prefix + name + "-app"}
}

// The probe path's settings: a probe every 500 ms per partition, lost when not back within 5 s.
const (
	probeInterval    = 500 * time.Millisecond
	probeLossTimeout = 5 * time.Second
)

// feature is one optional part of a replica's configuration.
type feature struct{ election, instances, multiCluster, chCluster bool }

// config is replica i's `tidemark run` configuration, as a user would write it for two replicas: one top-level
// kafka/collector/lag block for one cluster, or a clusters: list.
func (s *stage) config(i, port int, f feature, clusters []*kcluster, ch *chTarget) string {
	var b strings.Builder
	ind := func(n int, text string) {
		for _, l := range strings.SplitAfter(text, "\n") {
			if l != "" && l != "\n" {
				b.WriteString(strings.Repeat(" ", n))
			}
			b.WriteString(l)
		}
	}
	block := func(n int, c *kcluster) {
		ind(n, fmt.Sprintf("kafka:\n  brokers: [%s]\n  client_id: tidemark-replica-%d\n", strings.Join(c.brokers, ", "), i))
		ind(n, fmt.Sprintf(`collector:
  dead_letter_topic: bs-%s-%s-dlq
  replay_state_topic: bs-%s-%s-replay-state
  receipts:
    enabled: true
    topic: %s
    group: tmbs-%s-%s-receipts
    partitions: 6
  probe:
    enabled: true
    topic: %s
    group: tmbs-%s-%s-probe
    interval: %v
    loss_timeout: %v
    partitions: 4
`, s.id, c.name, s.id, c.name, c.receipts, s.id, c.name, c.probe, s.id, c.name, probeInterval, probeLossTimeout))
		if f.instances {
			ind(n, fmt.Sprintf("    instance_id: replica-%d\n", i))
		}
		ind(n, fmt.Sprintf("lag:\n  poll_interval: 1s\n  group_allow: [\"%s.*\"]\n", c.prefix))
		if !f.multiCluster {
			ind(n, fmt.Sprintf("  cluster: %s\n", c.name))
		}
		if f.election {
			ind(n, fmt.Sprintf("  election:\n    enabled: true\n    group: tmbs-%s-%s-lag-election\n    topic: bs-%s-%s-lag-lease\n",
				s.id, c.name, s.id, c.name))
			if s.o.sessionTimeout > 0 {
				ind(n, fmt.Sprintf("    session_timeout: %v\n", s.o.sessionTimeout))
			}
		}
	}
	if f.multiCluster {
		b.WriteString("clusters:\n")
		for _, c := range clusters {
			fmt.Fprintf(&b, "  - name: %s\n", c.name)
			block(4, c)
		}
	} else {
		block(0, clusters[0])
	}
	fmt.Fprintf(&b, "clickhouse:\n  addr: [%s]\n  database: %s\n  writer:\n    flush_interval: 500ms\n", strings.Join(ch.addrs, ", "), s.db)
	if f.chCluster {
		fmt.Fprintf(&b, "  cluster: %s\n", ch.cluster)
	}
	fmt.Fprintf(&b, "migrate: true\nhttp:\n  listen: 127.0.0.1:%d\nlog:\n  level: info\n", port)
	return b.String()
}

// sessionTimeoutRe finds lag.election.session_timeout in `tidemark run --print-config` (the only session_timeout
// key it prints).
var sessionTimeoutRe = regexp.MustCompile(`(?m)^\s*session_timeout:\s*(\S+)\s*$`)

// detect asks the binary which scale-out keys it knows (`--print-config` fails on an unknown key), and the
// repository whether it can start a ClickHouse cluster; then that the configuration combining them is accepted too
// (an error naming the key otherwise: the bench never stages less than it reports).
func (s *stage) detect(ctx context.Context) error {
	probe := []*kcluster{s.newCluster("a", s.stackBrokers), s.newCluster("b", s.stackBrokers)}
	ch := &chTarget{addrs: []string{s.stackCH}, cluster: "tidemark_ch"}
	check := func(f feature) error {
		p := filepath.Join(s.dir, "probe-config.yaml")
		if err := os.WriteFile(p, []byte(s.config(0, 1, f, probe, ch)), 0o644); err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, s.tidemark, "run", "--config", p, "--print-config")
		cmd.Env = benchproc.CleanEnv()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	}
	accepts := func(f feature) bool { return check(f) == nil }
	s.election, s.instances = accepts(feature{election: true}), accepts(feature{instances: true})
	s.multiCluster = accepts(feature{multiCluster: true})
	_, err := os.Stat(chclusterScript)
	s.chCluster = accepts(feature{chCluster: true}) && err == nil
	logf("this build: lag election %v, probe instance ids %v, clusters: %v, clickhouse.cluster with %s: %v",
		s.election, s.instances, s.multiCluster, chclusterScript, s.chCluster)
	if err := check(feature{s.election, s.instances, s.multiCluster, s.chCluster}); err != nil {
		return fmt.Errorf("tidemark run accepts each of these features but not their combination: %w", err)
	}
	if s.election {
		cmd := exec.CommandContext(ctx, s.tidemark, "run", "--config", filepath.Join(s.dir, "probe-config.yaml"), "--print-config")
		cmd.Env = benchproc.CleanEnv()
		out, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("tidemark run --print-config: %w", err)
		}
		m := sessionTimeoutRe.FindSubmatch(out)
		if m == nil {
			return fmt.Errorf("tidemark run --print-config shows no lag.election.session_timeout")
		}
		if s.sessionTimeout, err = time.ParseDuration(string(m[1])); err != nil {
			return fmt.Errorf("lag.election.session_timeout %q: %w", m[1], err)
		}
	}
	return nil
}

func (s *stage) startReplica(ctx context.Context, i int) (*replica, error) {
	port, err := benchproc.FreePort()
	if err != nil {
		return nil, err
	}
	r := &replica{name: "replica-" + strconv.Itoa(i), port: port, cfg: filepath.Join(s.dir, fmt.Sprintf("replica-%d.yaml", i))}
	f := feature{s.election, s.instances, s.multiCluster, s.chCluster}
	if err := os.WriteFile(r.cfg, []byte(s.config(i, port, f, s.clusters, s.ch)), 0o644); err != nil {
		return nil, err
	}
	if r.proc, err = benchproc.Start(r.name, filepath.Join(s.dir, r.name+".log"), nil, s.tidemark, "run", "--config", r.cfg); err != nil {
		return nil, err
	}
	if err := benchproc.WaitReady(ctx, r.proc, r.url("/readyz"), 120*time.Second); err != nil {
		r.proc.Kill()
		return nil, err
	}
	logf("%s ready (pid %d, http %d)", r.name, r.proc.Pid(), port)
	return r, nil
}

func (r *replica) url(path string) string { return "http://127.0.0.1:" + strconv.Itoa(r.port) + path }

func (s *stage) stopAll() {
	for _, r := range s.replicas {
		if !r.proc.Exited() {
			_ = r.proc.Stop(20 * time.Second)
		}
	}
}

// scrapeLoop scrapes every live replica's /metrics every 250 ms until ctx ends: whether it is each cluster's
// active lag exporter, and its peak RSS.
func (s *stage) scrapeLoop(ctx context.Context) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		start := time.Now()
		active := make([][]bool, len(s.clusters)) // cluster → replica
		for c := range active {
			active[c] = make([]bool, len(s.replicas))
		}
		for i, r := range s.replicas {
			if r.proc.Exited() {
				continue
			}
			if v, err := benchproc.StatusMB(r.proc.Pid(), "VmHWM"); err == nil {
				s.peakRSS[i] = v
			}
			fams, err := benchproc.Scrape(ctx, r.url("/metrics"))
			if err != nil {
				continue
			}
			for c, cl := range s.clusters {
				active[c][i] = s.isActive(fams, cl.name)
			}
		}
		at := time.Now() // after the scrapes: what they saw was so by then at the latest
		s.samplesMu.Lock()
		for c, cl := range s.clusters {
			cl.samples = append(cl.samples, activeSample{At: at, Start: start, Active: active[c]})
		}
		s.samplesMu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// isActive: with an election, the replica serves tidemark_lag_exporter_active{cluster}=1; without one (a build
// before it), every replica that serves the cluster's lag series exports it, so it counts as active.
func (s *stage) isActive(f benchproc.Families, cluster string) bool {
	if s.election {
		v, ok := f.Value("tidemark_lag_exporter_active", map[string]string{"cluster": cluster})
		return ok && v == 1
	}
	_, ok := f.Value("tidemark_lag_exporter_group_partitions", map[string]string{"cluster": cluster})
	return ok
}

// pickVictim is the replica to kill: the first cluster's active lag exporter of the last scrape (so its lease must
// move), else replica 0.
func (s *stage) pickVictim() int {
	s.samplesMu.Lock()
	defer s.samplesMu.Unlock()
	if smp := s.clusters[0].samples; len(smp) > 0 && s.election {
		for i, a := range smp[len(smp)-1].Active {
			if a {
				return i
			}
		}
	}
	return 0
}

// sleepLoad waits d, failing if a load generator exited meanwhile.
func (s *stage) sleepLoad(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
	}
	for _, c := range s.clusters {
		if c.load.Exited() {
			return fmt.Errorf("%s exited early: %v\n%s", c.load.Name, c.load.Wait(0), c.load.Tail(20))
		}
	}
	return nil
}
