package main

// The servers bench-scale adds to the stack's (one Kafka cluster, one ClickHouse): a second Kafka cluster and a
// ClickHouse cluster, each through deploy/local's scripts with ports from the environment, started only when
// not running and stopped only when this run started them.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

// chclusterScript starts ZooKeeper and ClickHouse replicas (the chcluster stage).
const chclusterScript = "deploy/local/chcluster.sh"

// script runs a deploy/local script with env added to the bench's environment and returns its stdout.
func script(ctx context.Context, env []string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "bash", append([]string{filepath.Join("deploy/local", name)}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s: %v\n%s", name, strings.Join(args, " "), err, errb.String())
	}
	return out.String(), nil
}

// exportValue is VAR's value in `export VAR=value` lines, "" when absent.
func exportValue(lines, name string) string {
	for _, l := range strings.Split(lines, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "export "+name+"="); ok {
			return strings.Trim(v, `"'`)
		}
	}
	return ""
}

// envOr is the environment variable's value, or def.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// startSecondKafka starts (unless running) a one-broker Kafka cluster, the second cluster `tidemark run` watches:
// kafka.sh with its own state directory (TIDEMARK_STATE_DIR + "-bench-scale-b") and ports
// TIDEMARK_BENCH_KAFKA_B_PORT (19592) and TIDEMARK_BENCH_KAFKA_B_CONTROLLER_PORT (19692). stop stops it if this
// call started it. When the stack runs its own second cluster (stack.sh up --second-cluster, TIDEMARK_KAFKA2_BROKERS
// in its env), that one is used and left running: its ports are the same.
func startSecondKafka(ctx context.Context) (brokers []string, stop func(), err error) {
	if b := os.Getenv("TIDEMARK_KAFKA2_BROKERS"); b != "" {
		logf("using the stack's second Kafka cluster %s", b)
		return strings.Split(b, ","), func() {}, nil
	}
	state := envOr("TIDEMARK_STATE_DIR", filepath.Join(envOr("XDG_STATE_HOME", filepath.Join(os.Getenv("HOME"), ".local/state")), "tidemark/local"))
	env := []string{"TIDEMARK_STATE_DIR=" + state + "-bench-scale-b",
		"TIDEMARK_KAFKA_PORT=" + envOr("TIDEMARK_BENCH_KAFKA_B_PORT", "19592"),
		"TIDEMARK_KAFKA_CONTROLLER_PORT=" + envOr("TIDEMARK_BENCH_KAFKA_B_CONTROLLER_PORT", "19692"),
		"TIDEMARK_KAFKA_NODE_PORTS="}
	out, err := script(ctx, env, "kafka.sh", "env")
	if err != nil {
		return nil, nil, err
	}
	started := false
	if exportValue(out, "TIDEMARK_KAFKA_BROKERS") == "" {
		logf("starting the second Kafka cluster (kafka.sh, 1 broker)")
		if _, err := script(ctx, env, "kafka.sh", "start", "--brokers", "1"); err != nil {
			return nil, nil, err
		}
		started = true
		if out, err = script(ctx, env, "kafka.sh", "env"); err != nil {
			return nil, nil, err
		}
	}
	b := exportValue(out, "TIDEMARK_KAFKA_BROKERS")
	if b == "" {
		return nil, nil, fmt.Errorf("kafka.sh env printed no TIDEMARK_KAFKA_BROKERS for the second cluster:\n%s", out)
	}
	stop = func() {
		if started {
			if _, err := script(context.Background(), env, "kafka.sh", "stop"); err != nil {
				logf("stop the second Kafka cluster: %v", err)
			}
		}
	}
	return strings.Split(b, ","), stop, nil
}

// chTarget is where the replicas write: one ClickHouse server, or the replicas of a ClickHouse cluster
// (clickhouse.cluster), one connection each.
type chTarget struct {
	addrs   []string
	cluster string // "" for one server
	conns   []driver.Conn
	stop    func()
}

func singleCH(addr string) (*chTarget, error) {
	t := &chTarget{addrs: []string{addr}}
	return t, t.connect()
}

// startCHCluster installs (once) and starts (unless running) ZooKeeper and two ClickHouse replicas with chcluster.sh (its ports from
// TIDEMARK_ZOOKEEPER_PORT, TIDEMARK_CHCLUSTER_PORT, TIDEMARK_CHCLUSTER_INTERSERVER_PORT).
func startCHCluster(ctx context.Context) (*chTarget, error) {
	out, err := script(ctx, nil, "chcluster.sh", "env")
	if err != nil {
		return nil, err
	}
	started := false
	if exportValue(out, "TIDEMARK_CHCLUSTER_ADDRS") == "" {
		logf("starting ZooKeeper and 2 ClickHouse replicas (chcluster.sh)")
		if _, err := script(ctx, nil, "chcluster.sh", "install"); err != nil { // Debian's zookeeper, once
			return nil, err
		}
		if _, err := script(ctx, nil, "chcluster.sh", "start", "--replicas", "2"); err != nil {
			return nil, err
		}
		started = true
		if out, err = script(ctx, nil, "chcluster.sh", "env"); err != nil {
			return nil, err
		}
	}
	t := &chTarget{addrs: strings.Split(exportValue(out, "TIDEMARK_CHCLUSTER_ADDRS"), ","), cluster: exportValue(out, "TIDEMARK_CHCLUSTER_NAME")}
	t.stop = func() {
		if started {
			if _, err := script(context.Background(), nil, "chcluster.sh", "stop"); err != nil {
				logf("stop the ClickHouse cluster: %v", err)
			}
		}
	}
	if t.addrs[0] == "" || t.cluster == "" {
		t.stop()
		return nil, fmt.Errorf("chcluster.sh env printed no addresses or name:\n%s", out)
	}
	if err := t.connect(); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

func (t *chTarget) connect() error {
	for _, a := range t.addrs {
		c, err := clickhouse.Open(&clickhouse.Options{Addr: []string{a}, Auth: clickhouse.Auth{Username: "default"},
			Settings: clickhouse.Settings{"max_execution_time": 120}})
		if err != nil {
			return err
		}
		t.conns = append(t.conns, c)
	}
	return nil
}

func (t *chTarget) close() {
	for _, c := range t.conns {
		_ = c.Close()
	}
	if t.stop != nil {
		t.stop()
	}
}

// local is the table holding a server's own rows: T, or T_local on a cluster (T is the Distributed table there).
func (t *chTarget) local(table string) string {
	if t.cluster == "" {
		return table
	}
	return table + "_local"
}

// execEach runs q on every server.
func (t *chTarget) execEach(ctx context.Context, q string) error {
	for i, c := range t.conns {
		if err := c.Exec(ctx, q); err != nil {
			return fmt.Errorf("on %s: %w", t.addrs[i], err)
		}
	}
	return nil
}

// sync waits until every replica has fetched every part of db.table's local table (no-op on one server).
func (t *chTarget) sync(ctx context.Context, db, table string) error {
	if t.cluster == "" {
		return nil
	}
	return t.execEach(ctx, "SYSTEM SYNC REPLICA "+db+"."+t.local(table))
}

// queryEach runs q and calls row with each row's Scan.
func queryEach(ctx context.Context, conn driver.Conn, row func(scan func(...any) error) error, q string, args ...any) error {
	rows, err := conn.Query(ctx, q, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}
