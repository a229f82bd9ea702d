package main

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/grafana/grafana-plugin-sdk-go/backend"
	"github.com/grafana/grafana-plugin-sdk-go/backend/grpcplugin"
	"github.com/grafana/grafana-plugin-sdk-go/genproto/pluginv2"
	goplugin "github.com/hashicorp/go-plugin"

	"github.com/tidemark/tidemark/internal/store/query/querytest"
	"github.com/tidemark/tidemark/internal/testenv"
)

// TestBinaryAsGrafanaLoadsIt builds gpx_tidemark, starts it the way Grafana does (hashicorp/go-plugin with the SDK's
// handshake, gRPC), and runs a health check and a query through it against a seeded database: main.go, the handshake
// and the served handlers together.
func TestBinaryAsGrafanaLoadsIt(t *testing.T) {
	db, conn := testenv.ClickHouseDB(t)
	querytest.Schema(t, db)
	querytest.SeedFixture(t, conn)

	bin := filepath.Join(t.TempDir(), "gpx_tidemark")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	client := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig: goplugin.HandshakeConfig{ProtocolVersion: grpcplugin.ProtocolVersion,
			MagicCookieKey: grpcplugin.MagicCookieKey, MagicCookieValue: grpcplugin.MagicCookieValue},
		VersionedPlugins: map[int]goplugin.PluginSet{grpcplugin.ProtocolVersion: {
			"diagnostics": &grpcplugin.DiagnosticsGRPCPlugin{},
			"data":        &grpcplugin.DataGRPCPlugin{},
		}},
		Cmd:              exec.Command(bin),
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		StartTimeout:     30 * time.Second,
	})
	t.Cleanup(client.Kill)
	rpc, err := client.Client()
	if err != nil {
		t.Fatalf("start plugin: %v", err)
	}
	rawDiag, err := rpc.Dispense("diagnostics")
	if err != nil {
		t.Fatal(err)
	}
	rawData, err := rpc.Dispense("data")
	if err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(map[string]any{"address": testenv.ClickHouseAddr(t), "database": db})
	pctx := &pluginv2.PluginContext{OrgId: 1, PluginId: "tidemark-kafka-datasource",
		DataSourceInstanceSettings: &pluginv2.DataSourceInstanceSettings{Id: 1, Uid: "tm", Name: "Tidemark",
			JsonData: js, LastUpdatedMS: time.Now().UnixMilli()}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	health, err := rawDiag.(grpcplugin.DiagnosticsClient).CheckHealth(ctx, &pluginv2.CheckHealthRequest{PluginContext: pctx})
	if err != nil {
		t.Fatal(err)
	}
	if health.Status != pluginv2.CheckHealthResponse_OK || !strings.HasPrefix(health.Message, "Connected to ClickHouse") {
		t.Fatalf("health %v %q", health.Status, health.Message)
	}

	q := backend.DataQuery{RefID: "A", Interval: time.Minute, MaxDataPoints: 100, JSON: []byte(`{"queryType":"slo","sloThresholdMs":500}`),
		TimeRange: backend.TimeRange{From: querytest.T0, To: querytest.T0.Add(2 * time.Minute)}}
	req := backend.ToProto().QueryDataRequest(&backend.QueryDataRequest{Queries: []backend.DataQuery{q}})
	req.PluginContext = pctx
	resp, err := rawData.(grpcplugin.DataClient).QueryData(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := backend.FromProto().QueryDataResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	r := got.Responses["A"]
	if r.Error != nil || len(r.Frames) != 1 {
		t.Fatalf("query: %v, %d frames", r.Error, len(r.Frames))
	}
	// the fixture's SLO at 500 ms: 10 of 15 good, then 10 of 10
	good, _ := r.Frames[0].FieldByName("good")
	total, _ := r.Frames[0].FieldByName("total")
	if good.At(0) != 10.0 || total.At(0) != 15.0 || good.At(1) != 10.0 || total.At(1) != 10.0 {
		t.Fatalf("good %v/%v, %v/%v", good.At(0), total.At(0), good.At(1), total.At(1))
	}
}
