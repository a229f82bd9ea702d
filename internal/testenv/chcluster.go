package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// ClickHouseCluster is a replicated ClickHouse cluster of the test's own: Debian's ZooKeeper and shards x replicas
// ClickHouse servers started by deploy/local/chcluster.sh on free ports and a temporary state directory, stopped when
// the test ends.
type ClickHouseCluster struct {
	t        testing.TB
	env      []string
	Name     string   // the cluster's name in remote_servers (what clickhouse.cluster names)
	Addrs    []string // native-protocol host:port of node 1, 2, ...; node i is replica (i-1)%Replicas+1 of shard (i-1)/Replicas+1
	Shards   int
	Replicas int
}

// StartClickHouseCluster starts the cluster. It runs under the integration environment: without the shared stack
// (TIDEMARK_CLICKHOUSE_ADDR) it skips, under CI=true it fails; chcluster.sh installs ZooKeeper and ClickHouse from
// Debian when missing.
func StartClickHouseCluster(t testing.TB, shards, replicas int) *ClickHouseCluster {
	t.Helper()
	ClickHouseAddr(t)
	return onFreePorts(t, fmt.Sprintf("chcluster.sh start --shards %d --replicas %d", shards, replicas),
		func() (*ClickHouseCluster, string, error) { return startClickHouseCluster(t, shards, replicas) })
}

// onFreePorts runs start, one attempt at starting servers on ports it picks with FreePort, and returns what it
// started. The ports are free when picked, but the kernel may hand one to another process (another test's server,
// an outgoing connection) before our server binds it: several ports held open for seconds each make that likely on
// a busy machine. That one race, and only it ("already in use" in the output, from a script's check or a server's
// bind), gets fresh ports, at most three attempts in all; every other failure fails the test, naming what.
func onFreePorts[T any](t testing.TB, what string, start func() (T, string, error)) T {
	t.Helper()
	for attempt := 1; ; attempt++ {
		v, out, err := start()
		if err == nil {
			return v
		}
		if attempt == 3 || !strings.Contains(out, "already in use") {
			t.Fatalf("%s: %v\n%s", what, err, out)
		}
		t.Logf("%s: a picked port was taken before its server bound it; new ports (attempt %d)", what, attempt+1)
	}
}

// startClickHouseCluster is one attempt of StartClickHouseCluster: the start's output (with the servers' error.log
// tails when it fails) and error.
func startClickHouseCluster(t testing.TB, shards, replicas int) (*ClickHouseCluster, string, error) {
	t.Helper()
	n := shards * replicas
	var nodes, inter []string
	for range n {
		nodes = append(nodes, strconv.Itoa(FreePort(t)))
		inter = append(inter, strconv.Itoa(FreePort(t)))
	}
	state := t.TempDir()
	c := &ClickHouseCluster{t: t, Name: "tm_test_cluster", Shards: shards, Replicas: replicas,
		env: append(os.Environ(), "TIDEMARK_STATE_DIR="+state,
			"TIDEMARK_ZOOKEEPER_PORT="+strconv.Itoa(FreePort(t)),
			"TIDEMARK_CHCLUSTER_NODE_PORTS="+strings.Join(nodes, ","),
			"TIDEMARK_CHCLUSTER_INTERSERVER_PORTS="+strings.Join(inter, ","),
			"TIDEMARK_CHCLUSTER_NAME=tm_test_cluster")}
	for _, p := range nodes {
		c.Addrs = append(c.Addrs, "127.0.0.1:"+p)
	}
	errorLogs := func() string {
		var b strings.Builder
		for i := range n {
			log, _ := os.ReadFile(filepath.Join(state, "chcluster", fmt.Sprintf("node-%d", i+1), "log", "error.log"))
			if len(log) > 4000 {
				log = log[len(log)-4000:]
			}
			fmt.Fprintf(&b, "node %d error.log (tail):\n%s\n", i+1, log)
		}
		return b.String()
	}
	at := time.Now()
	if out, err := c.run("start", "--shards", strconv.Itoa(shards), "--replicas", strconv.Itoa(replicas)); err != nil {
		logs := errorLogs()
		_, _ = c.run("stop")
		return nil, out + logs, err
	}
	t.Cleanup(func() {
		if t.Failed() { // the servers' own account of what went wrong, before the state dir goes
			t.Log(errorLogs())
		}
		c.Run("stop")
	})
	t.Logf("ClickHouse cluster %s (%d x %d) on %v ready in %v", c.Name, shards, replicas, c.Addrs, time.Since(at).Round(time.Millisecond))
	return c, "", nil
}

// Run runs chcluster.sh with args against this cluster (start steps wait for readiness with a real query).
func (c *ClickHouseCluster) Run(args ...string) {
	c.t.Helper()
	if out, err := c.run(args...); err != nil {
		c.t.Fatalf("chcluster.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

func (c *ClickHouseCluster) run(args ...string) (string, error) {
	out, err := localScript(300*time.Second, "chcluster.sh", c.env, args...)
	return string(out), err
}

// StopNode stops ClickHouse node i (1-based); StartNode starts it again on its data.
func (c *ClickHouseCluster) StopNode(i int)  { c.Run("stop-node", strconv.Itoa(i)) }
func (c *ClickHouseCluster) StartNode(i int) { c.Run("start-node", strconv.Itoa(i)) }

// Conn opens a connection to node i's database (default when ""), closed when the test ends.
func (c *ClickHouseCluster) Conn(i int, database string) driver.Conn {
	c.t.Helper()
	if database == "" {
		database = "default"
	}
	conn, err := clickhouse.Open(&clickhouse.Options{
		Addr:        []string{c.Addrs[i-1]},
		Auth:        clickhouse.Auth{Database: database, Username: "default"},
		DialTimeout: 5 * time.Second,
		Settings:    clickhouse.Settings{"max_execution_time": 60},
	})
	if err != nil {
		c.t.Fatalf("open clickhouse node %d: %v", i, err)
	}
	c.t.Cleanup(func() { _ = conn.Close() })
	return conn
}
