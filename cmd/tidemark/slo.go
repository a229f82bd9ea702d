package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidemark/tidemark/internal/report"
	"github.com/tidemark/tidemark/internal/store"
	"github.com/tidemark/tidemark/internal/store/query"
	"github.com/tidemark/tidemark/latency"
)

func init() { subcommands = append(subcommands, newSLOCmd) }

// newSLOCmd is `tidemark slo`, the parent of the SLO commands.
func newSLOCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "slo",
		Short: "End-to-end latency service-level objectives",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(newSLOReportCmd(time.Now))
	return cmd
}

// windowFlag is a pflag.Value for a duration that also takes whole days ("30d").
type windowFlag struct{ d *time.Duration }

func (f windowFlag) String() string {
	if f.d == nil {
		return ""
	}
	return report.FormatWindow(*f.d)
}
func (f windowFlag) Set(s string) error {
	d, err := report.ParseWindow(s)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}
func (windowFlag) Type() string { return "duration" }

// sloReportFlags are `tidemark slo report`'s flags.
type sloReportFlags struct {
	cfg                   query.Config
	conn                  store.Config // the connection flags, shared with migrate
	chf                   chFlags
	output, at            string
	period, threshold     time.Duration
	objective             float64
	topics, groups, hosts []string
}

// newSLOReportCmd is `tidemark slo report`: per topic and group, the live samples of the period, their compliance with
// the objective, the error budget left, the burn rate of each standard window, and what the SLO excluded. now is the
// clock the report ends at unless --at is given.
func newSLOReportCmd(now func() time.Time) *cobra.Command {
	sf := &sloReportFlags{period: 30 * 24 * time.Hour, threshold: 500 * time.Millisecond, objective: 0.999}
	cmd := &cobra.Command{
		Use:   "report",
		Short: "Print end-to-end latency SLO compliance, error budget and burn rates per topic and group",
		Long: "report reads Tidemark's ClickHouse tables and prints, for every topic and consumer group with latency\n" +
			"samples in the window: live samples, how many met the threshold (compliance), the error budget left for the\n" +
			"objective, the burn rate over the standard windows (5m, 30m, 1h, 2h, 6h, 1d, 3d) and which multiwindow\n" +
			"burn-rate alerts would fire, and how many samples were excluded (replayed, backfill, skew-flagged,\n" +
			"unmeasured). MIN and MAX bound the true compliance by each sample's interval (good for MAX when its lower\n" +
			"end meets the threshold, for MIN only when its upper end does); UNBOUNDED counts samples whose upper end is\n" +
			"unknown. Budget and burn rates use the estimate. Counts are exact (raw rows, duplicates collapsed).\n" +
			"docs/slo.md defines every number.\n" +
			"The password may come from TIDEMARK_CLICKHOUSE_PASSWORD.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return sf.run(cmd, now) },
	}
	f := cmd.Flags()
	sf.chf.register(f, &sf.conn)
	f.StringVar(&sf.cfg.Database, "database", "tidemark", "database holding Tidemark's tables")
	f.DurationVar(&sf.cfg.MaxExecutionTime, "timeout", 60*time.Second, "server-side limit of the report query (max_execution_time)")
	f.Var(windowFlag{&sf.period}, "window", "SLO period the compliance and error budget cover, e.g. 30d, 7d, 12h")
	f.DurationVar(&sf.threshold, "threshold", sf.threshold, "a live message is good when its corrected end-to-end latency is at most this")
	f.Float64Var(&sf.objective, "objective", sf.objective, "target fraction of good live messages, in (0, 1)")
	f.StringVarP(&sf.output, "output", "o", "table", "output format: table or json")
	f.StringVar(&sf.at, "at", "", "end of the report (RFC 3339); default now")
	f.StringArrayVar(&sf.topics, "topic", nil, "only this topic (repeatable)")
	f.StringArrayVar(&sf.groups, "group", nil, "only this consumer group (repeatable)")
	f.StringArrayVar(&sf.hosts, "host", nil, "only samples processed on this consumer host (repeatable)")
	return cmd
}

// run checks the flags, reads the period's and the standard windows' counts from ClickHouse and prints the report
// in the --output format.
func (sf *sloReportFlags) run(cmd *cobra.Command, now func() time.Time) error {
	if sf.output != "table" && sf.output != "json" {
		return fmt.Errorf("--output: %q is not one of table, json", sf.output)
	}
	obj := latency.Objective{Target: sf.objective, Threshold: sf.threshold, Period: sf.period}
	if err := obj.Validate(); err != nil {
		return fmt.Errorf("--objective/--threshold/--window: %w", err)
	}
	end, err := sf.end(now)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	r, err := sf.open(ctx)
	if err != nil {
		return err
	}
	defer r.Close()
	windows := report.StandardWindows()
	rows, err := r.SLOReport(ctx, query.SLOReportQuery{End: end, Period: sf.period, Windows: windows,
		ThresholdMs: float64(sf.threshold) / float64(time.Millisecond),
		Filter:      query.Filter{Topics: sf.topics, Groups: sf.groups, Hosts: sf.hosts}})
	if err != nil {
		return err
	}
	rep, err := report.NewSLOReport(obj, end, windows, sloInputs(rows))
	if err != nil {
		return err
	}
	if sf.output == "json" {
		return rep.WriteJSON(cmd.OutOrStdout())
	}
	return rep.WriteTable(cmd.OutOrStdout())
}

// end is the report's end: --at, which must be an RFC 3339 time ClickHouse's DateTime can hold, else now().
func (sf *sloReportFlags) end(now func() time.Time) (time.Time, error) {
	if sf.at == "" {
		return now(), nil
	}
	t, err := time.Parse(time.RFC3339, sf.at)
	if err != nil {
		return time.Time{}, fmt.Errorf("--at %q: want an RFC 3339 time like 2026-11-29T12:00:00Z", sf.at)
	}
	if t.Before(query.MinTime) || t.After(query.MaxTime) {
		return time.Time{}, fmt.Errorf("--at %s: Tidemark's tables hold times from %s to %s (ClickHouse DateTime); give an end within them",
			sf.at, query.MinTime.Format(time.RFC3339), query.MaxTime.Format(time.RFC3339))
	}
	return t, nil
}

// open connects to ClickHouse with the connection flags and checks that the schema is one the report can read (a
// newer schema is fine: its tables keep the columns read here).
func (sf *sloReportFlags) open(ctx context.Context) (*query.Reader, error) {
	sf.chf.apply(&sf.conn)
	if err := sf.conn.TLS.Validate("--tls"); err != nil {
		return nil, err
	}
	pw, err := sf.conn.ResolvePassword()
	if err != nil {
		return nil, fmt.Errorf("--password-file: %w", err)
	}
	dial, err := sf.conn.Dialer()
	if err != nil {
		return nil, fmt.Errorf("--tls: %w", err)
	}
	sf.cfg.Addr, sf.cfg.User, sf.cfg.Password, sf.cfg.DialContext = sf.conn.Addr, sf.conn.User, pw.Reveal(), dial
	r, err := query.Open(ctx, sf.cfg)
	if err != nil {
		return nil, err
	}
	if _, err := r.CheckSchema(ctx); err != nil && !errors.Is(err, store.ErrSchemaNewer) {
		_ = r.Close()
		return nil, fmt.Errorf("database %s: %w (run `tidemark migrate`)", sf.cfg.Database, err)
	}
	return r, nil
}

// sloInputs turns the query's rows into the report's inputs: the period's and each window's counts, the excluded
// samples and the compliance band of the period.
func sloInputs(rows []query.SLOReportRow) []report.SLOInput {
	in := make([]report.SLOInput, len(rows))
	for i, row := range rows {
		in[i] = report.SLOInput{Topic: row.Topic, Group: row.Group, Period: report.Counts(row.Period),
			Replayed: row.Replayed, Redelivered: row.Redelivered, Backfill: row.Backfill, SkewFlagged: row.SkewFlagged, Unmeasured: row.Unmeasured,
			Band: &report.Band{GoodMin: row.PeriodGoodMin, GoodMax: row.PeriodGoodMax, Unbounded: row.PeriodUnbounded}}
		for _, c := range row.Windows {
			in[i].Windows = append(in[i].Windows, report.Counts(c))
		}
	}
	return in
}
