package main

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidemark/tidemark/internal/store"
)

func init() { subcommands = append(subcommands, newMigrateCmd) }

// newMigrateCmd is `tidemark migrate`: bring a ClickHouse database to this build's schema version, or (--check)
// only report where it stands.
func newMigrateCmd() *cobra.Command {
	var cfg store.Config
	var chf chFlags
	var check, dropExpired bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade Tidemark's ClickHouse schema (idempotent)",
		Long: "migrate creates the database and applies every schema migration this build embeds that the database\n" +
			"lacks, in order; re-running it changes nothing. The SQL dialect (legacy for ClickHouse 18.16, modern for\n" +
			">= 23) is detected from the server when the database is created. --check only reports the schema version\n" +
			"and exits non-zero unless it is current. The password may come from TIDEMARK_CLICKHOUSE_PASSWORD.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			chf.apply(&cfg)
			s, err := store.Open(ctx, cfg)
			if err != nil {
				return err
			}
			defer s.Close()
			out := cmd.OutOrStdout()
			if check {
				v, err := s.SchemaVersion(ctx)
				if err != nil {
					return err
				}
				if err := store.CheckSchemaVersion(v); err != nil {
					return fmt.Errorf("database %s: %w", s.Config().Database, err)
				}
				fmt.Fprintf(out, "database %s: schema version %d, current\n", s.Config().Database, v)
				return nil
			}
			res, err := s.Migrate(ctx)
			if err != nil {
				if errors.Is(err, store.ErrSchemaNewer) {
					return fmt.Errorf("%w (this build: schema version %d)", err, store.CurrentSchemaVersion)
				}
				return err
			}
			applied := "nothing to apply"
			if len(res.Applied) > 0 {
				applied = "applied " + strings.Join(res.Applied, ", ")
			}
			fmt.Fprintf(out, "database %s on ClickHouse %s (dialect %s): schema version %d -> %d, %s\n",
				s.Config().Database, res.Server, res.Dialect, res.From, res.To, applied)
			if dropExpired {
				dropped, err := s.DropExpired(ctx, time.Now())
				for _, d := range dropped {
					fmt.Fprintf(out, "dropped partition %s of %s\n", d.Day, d.Table)
				}
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	chf.register(f, &cfg)
	f.StringVar(&cfg.Database, "database", "tidemark", "database holding Tidemark's tables (created if missing)")
	f.StringVar(&cfg.Dialect, "dialect", "auto", "DDL dialect for a new database: auto, legacy (ClickHouse 18.16) or modern (>= 23)")
	f.IntVar(&cfg.RetentionDays, "retention-days", 14, "days raw rows are kept (TTL on modern servers)")
	f.IntVar(&cfg.RollupRetentionDays, "rollup-retention-days", 90, "days the per-minute and per-hour rollups are kept")
	f.StringVar(&cfg.Cluster, "cluster", store.DefaultCluster, "Kafka cluster name given to the rows stored before the cluster column (migration 0006): the first clusters: name of the config that wrote them (default without clusters:)")
	f.BoolVar(&check, "check", false, "only report the schema version; exit non-zero unless current")
	f.BoolVar(&dropExpired, "drop-expired", false, "after migrating, drop daily partitions older than the retention")
	return cmd
}
