package main

import (
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// The replicas' configuration is YAML a user would write: one cluster at the top level, or a clusters: list, each
// optional block where the feature puts it.
func TestConfig(t *testing.T) {
	s := &stage{id: "x", db: "tdb", prefix: "bench-scale-x-", o: options{sessionTimeout: 6 * time.Second}}
	cls := []*kcluster{s.newCluster("a", []string{"127.0.0.1:1"}), s.newCluster("b", []string{"127.0.0.1:2", "127.0.0.1:3"})}
	ch := &chTarget{addrs: []string{"127.0.0.1:9", "127.0.0.1:10"}, cluster: "tidemark_ch"}

	type probe struct {
		Topic      string `json:"topic"`
		Group      string `json:"group"`
		InstanceID string `json:"instance_id"`
	}
	type block struct {
		Name  string `json:"name"`
		Kafka struct {
			Brokers []string `json:"brokers"`
		} `json:"kafka"`
		Collector struct {
			Receipts struct {
				Topic string `json:"topic"`
				Group string `json:"group"`
			} `json:"receipts"`
			Probe probe `json:"probe"`
		} `json:"collector"`
		Lag struct {
			Cluster    string   `json:"cluster"`
			GroupAllow []string `json:"group_allow"`
			Election   *struct {
				Group          string `json:"group"`
				SessionTimeout string `json:"session_timeout"`
			} `json:"election"`
		} `json:"lag"`
	}
	type file struct {
		block
		Clusters   []block `json:"clusters"`
		ClickHouse struct {
			Addr    []string `json:"addr"`
			Cluster string   `json:"cluster"`
		} `json:"clickhouse"`
		HTTP struct {
			Listen string `json:"listen"`
		} `json:"http"`
	}
	parse := func(f feature) file {
		t.Helper()
		var out file
		if err := yaml.Unmarshal([]byte(s.config(1, 9401, f, cls, ch)), &out); err != nil {
			t.Fatalf("%v\n%s", err, s.config(1, 9401, f, cls, ch))
		}
		return out
	}

	one := parse(feature{})
	if one.Kafka.Brokers[0] != "127.0.0.1:1" || one.Lag.Cluster != "a" || one.Collector.Receipts.Topic != "bs-x-a-receipts" ||
		one.Collector.Probe.InstanceID != "" || one.Lag.Election != nil || len(one.Clusters) != 0 || one.ClickHouse.Cluster != "" ||
		one.HTTP.Listen != "127.0.0.1:9401" || one.Lag.GroupAllow[0] != "bench-scale-x-a-.*" {
		t.Fatalf("one cluster, no features: %+v", one)
	}

	all := parse(feature{election: true, instances: true, multiCluster: true, chCluster: true})
	if all.Kafka.Brokers != nil || len(all.Clusters) != 2 {
		t.Fatalf("clusters: want 2 entries and no top-level kafka: %+v", all)
	}
	b := all.Clusters[1]
	if b.Name != "b" || len(b.Kafka.Brokers) != 2 || b.Lag.Cluster != "" || b.Collector.Probe.InstanceID != "replica-1" ||
		b.Collector.Probe.Topic != "bs-x-b-probe" || b.Collector.Receipts.Group != "tmbs-x-b-receipts" ||
		b.Lag.Election == nil || b.Lag.Election.Group != "tmbs-x-b-lag-election" || b.Lag.Election.SessionTimeout != "6s" {
		t.Fatalf("cluster b: %+v", b)
	}
	if all.ClickHouse.Cluster != "tidemark_ch" || len(all.ClickHouse.Addr) != 2 {
		t.Fatalf("clickhouse: %+v", all.ClickHouse)
	}
}
