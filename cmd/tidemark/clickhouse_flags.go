package main

import (
	"os"
	"strings"

	"github.com/spf13/pflag"

	"github.com/tidemark/tidemark/internal/secret"
	"github.com/tidemark/tidemark/internal/store"
)

// chFlags are the ClickHouse connection flags of the one-shot commands (migrate, slo report): the same settings as
// the clickhouse: block of `tidemark run`.
type chFlags struct {
	addrs    string
	password string
}

func (cf *chFlags) register(f *pflag.FlagSet, cfg *store.Config) {
	defAddr := os.Getenv("TIDEMARK_CLICKHOUSE_ADDR")
	if defAddr == "" {
		defAddr = "127.0.0.1:9000"
	}
	f.StringVar(&cf.addrs, "clickhouse-addr", defAddr, "ClickHouse native-protocol host:port, comma-separated for failover (env TIDEMARK_CLICKHOUSE_ADDR)")
	f.StringVar(&cfg.User, "user", "default", "ClickHouse user")
	f.StringVar(&cfg.ClickHouseCluster, "clickhouse-cluster", "", "ClickHouse cluster (remote_servers) the schema lives on: ON CLUSTER DDL, Replicated* and Distributed tables (clickhouse.cluster; docs/schema.md)")
	f.StringVar(&cf.password, "password", "", "ClickHouse password (prefer --password-file or env TIDEMARK_CLICKHOUSE_PASSWORD)")
	f.StringVar(&cfg.PasswordFile, "password-file", "", "file holding the ClickHouse password")
	f.BoolVar(&cfg.TLS.Enabled, "tls", false, "use TLS (the server's secure native port)")
	f.StringVar(&cfg.TLS.CAFile, "tls-ca-file", "", "PEM bundle of the CA that signed the server's certificate (default: system roots)")
	f.StringVar(&cfg.TLS.CertFile, "tls-cert-file", "", "client certificate (PEM) for mutual TLS")
	f.StringVar(&cfg.TLS.KeyFile, "tls-key-file", "", "client certificate's private key (PEM)")
	f.StringVar(&cfg.TLS.ServerName, "tls-server-name", "", "name the server's certificate must carry, when not the dialled host")
	f.BoolVar(&cfg.TLS.InsecureSkipVerify, "tls-insecure-skip-verify", false, "do not verify the server certificate (tests only)")
}

// apply fills cfg's addresses and password (flag, else TIDEMARK_CLICKHOUSE_PASSWORD unless a file is given).
func (cf *chFlags) apply(cfg *store.Config) {
	for _, a := range strings.Split(cf.addrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			cfg.Addr = append(cfg.Addr, a)
		}
	}
	cfg.Password = secret.String(cf.password)
	if cfg.Password == "" && cfg.PasswordFile == "" {
		cfg.Password = secret.String(os.Getenv("TIDEMARK_CLICKHOUSE_PASSWORD"))
	}
}
