package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/tidemark/tidemark/internal/kafka/lagread"
	"github.com/tidemark/tidemark/internal/kafkaconfig"
	"github.com/tidemark/tidemark/internal/kafkaconfig/awsmsk"
	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/lagexporter/timeline"
)

func init() { subcommands = append(subcommands, newLagCmd) }

// lagFlags are the flags every `tidemark lag` command shares.
type lagFlags struct {
	configPath                           string // --config: a tidemark run config whose kafka: block is used
	fs                                   *pflag.FlagSet
	brokers                              []string
	groups, groupDeny, topics, topicDeny []string
	readCommitted, resetLatest           []string
	output                               string
	noRecords                            bool
	cluster                              string
	kafka                                *kafkaconfig.Config // the chosen cluster's kafka: block (live commands, after config)
	timeout                              time.Duration
	hasTimeout                           bool // --timeout is registered (live commands)
}

func (lf *lagFlags) register(cmd *cobra.Command, withKafka bool) {
	f := cmd.Flags()
	if withKafka {
		lf.fs = f
		def := os.Getenv("TIDEMARK_KAFKA_BROKERS")
		if def == "" {
			def = "127.0.0.1:9092"
		}
		f.StringSliceVar(&lf.brokers, "brokers", strings.Split(def, ","), "bootstrap brokers, comma-separated (env TIDEMARK_KAFKA_BROKERS; overrides --config's kafka.brokers)")
		f.StringVar(&lf.configPath, "config", "", "a Tidemark config file: its kafka: block (brokers, TLS, SASL) is used; flags override it")
		registerKafkaFlags(f)
		f.DurationVar(&lf.timeout, "timeout", time.Minute, "deadline of the connection check, of one poll cycle, and of every network step in them (> 0)")
		lf.hasTimeout = true
		f.StringVar(&lf.cluster, "cluster", "default", "the cluster: with --config listing clusters:, the entry to read (its kafka: block; "+
			"optional when it lists one); its name is the cluster label")
	}
	f.StringArrayVar(&lf.groups, "group", nil, "only groups matching this anchored regexp (repeatable)")
	f.StringArrayVar(&lf.groupDeny, "group-deny", nil, "skip groups matching this anchored regexp (repeatable)")
	f.StringArrayVar(&lf.topics, "topic", nil, "only topics matching this anchored regexp (repeatable)")
	f.StringArrayVar(&lf.topicDeny, "topic-deny", nil, "skip topics matching this anchored regexp (repeatable)")
	f.StringArrayVar(&lf.readCommitted, "read-committed", nil, "groups matching this regexp read with isolation read_committed: End = last stable offset (repeatable)")
	f.StringArrayVar(&lf.resetLatest, "reset-latest", nil, "groups matching this regexp have auto.offset.reset=latest: partitions without a commit have lag 0 (repeatable)")
	f.StringVarP(&lf.output, "output", "o", "table", "output format: table or json")
	f.BoolVar(&lf.noRecords, "no-record-timestamps", false, "do not fetch the first unconsumed record (time lag is then interpolated and flagged estimated)")
}

// config builds a validated lagexporter.Config from the flags, on top of base (a timeline's config, or nil).
func (lf *lagFlags) config(base *timeline.ConfigBlock) (*lagexporter.Config, error) {
	if lf.output != "table" && lf.output != "json" {
		return nil, fmt.Errorf("--output: %q is not one of table, json", lf.output)
	}
	if lf.hasTimeout && lf.timeout <= 0 {
		return nil, fmt.Errorf("--timeout: must be > 0, got %s", lf.timeout)
	}
	// flag patterns are checked here so the error names the flag the user typed, not a config key
	for _, fp := range []struct {
		name string
		pats []string
	}{{"--group", lf.groups}, {"--group-deny", lf.groupDeny}, {"--topic", lf.topics}, {"--topic-deny", lf.topicDeny},
		{"--read-committed", lf.readCommitted}, {"--reset-latest", lf.resetLatest}} {
		for _, p := range fp.pats {
			if _, err := lagexporter.CompilePattern(p); err != nil {
				return nil, fmt.Errorf("%s %q: %w", fp.name, p, err)
			}
		}
	}
	if lf.fs != nil { // live: the cluster is chosen with the kafka: block it names
		kc, name, err := loadClusterKafkaConfig(lf.configPath, lf.fs, nil, "tidemark-lag", lf.cluster, lf.fs.Changed("cluster"))
		if err != nil {
			return nil, err
		}
		lf.kafka, lf.cluster = &kc, name
	}
	cfg := &lagexporter.Config{Cluster: lf.cluster}
	if base != nil {
		if err := base.Apply(cfg); err != nil {
			return nil, fmt.Errorf("timeline config: %w", err)
		}
	}
	cfg.GroupAllow = append(cfg.GroupAllow, lf.groups...)
	cfg.GroupDeny = append(cfg.GroupDeny, lf.groupDeny...)
	cfg.TopicAllow = append(cfg.TopicAllow, lf.topics...)
	cfg.TopicDeny = append(cfg.TopicDeny, lf.topicDeny...)
	var rules []lagexporter.GroupRule
	for _, re := range lf.readCommitted {
		rules = append(rules, lagexporter.GroupRule{Match: re, Isolation: lagexporter.ReadCommitted})
	}
	for _, re := range lf.resetLatest {
		rules = append(rules, lagexporter.GroupRule{Match: re, Reset: lagexporter.ResetLatest})
	}
	cfg.Groups = append(rules, cfg.Groups...)
	if lf.noRecords {
		f := false
		cfg.ReadRecordTimestamps = &f
	}
	cfg.SetDefaults()
	if lf.hasTimeout {
		cfg.CycleTimeout = lf.timeout
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("lag config: %w", err)
	}
	return cfg, nil
}

// reader connects to the cluster the kafka: settings (--config, environment, flags) name. It checks the connection
// first, so that a refused login or certificate, or a port that is not Kafka, is one error naming the broker and
// mechanism instead of a cycle of per-partition failures. The check is bounded by --timeout, and so is every network
// step of the reader (dial, each request), so no step of a command outlasts --timeout.
func (lf *lagFlags) reader(ctx context.Context) (*lagread.ClusterReader, error) {
	if lf.kafka == nil {
		return nil, errors.New("lag flags: config must be called before reader")
	}
	kc := *lf.kafka
	awsmsk.Enable(&kc)
	cl, err := kc.Resolve()
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, lf.timeout)
	defer cancel()
	if err := cl.Check(cctx); err != nil {
		return nil, err
	}
	sc := cl.Sarama()
	kafkaconfig.BoundTimeouts(sc, lf.timeout)
	return lagread.NewClusterReader(cl.Brokers(), sc)
}

// newLagCmd is `tidemark lag`: one poll cycle against a live cluster, printed like Kafka's consumer-groups command
// plus time lag, status and flags.
func newLagCmd() *cobra.Command {
	var lf lagFlags
	cmd := &cobra.Command{
		Use:   "lag",
		Short: "Print group lag once (classic, KIP-848, share and streams groups): offsets, lag, time lag, status, flags",
		Long: "lag reads the cluster once (committed offsets first, then end offsets, then the first unconsumed record of\n" +
			"each lagging partition) and prints one row per group-partition. TYPE is Kafka's group type (classic,\n" +
			"consumer = KIP-848, share = KIP-932, streams = KIP-1071); SUBTOPOLOGY a streams group's subtopology reading\n" +
			"the topic. LAG is the effective lag (records the group will still receive: transaction markers are not\n" +
			"backlog); for a share group COMMITTED is its share-partition start offset and LAG the broker's share-partition\n" +
			"lag. RETENTION-LEFT is the time (and bytes) before retention may delete the first unconsumed record; CATCH-UP\n" +
			"the time until the lag reaches 0 at the rates of the status window (\"never\" while it does not fall); FLAGS\n" +
			"explain anything unusual (docs/lag.md).\n" +
			"Status needs a window of polls: a one-shot run can only show OK, STOP (no commit for long, from commit\n" +
			"times when known), or threshold-based statuses.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := lf.config(nil)
			if err != nil {
				return err
			}
			r, err := lf.reader(cmd.Context())
			if err != nil {
				return err
			}
			defer r.Close()
			loop, err := lagexporter.NewLoop(cfg, r, time.Now)
			if err != nil {
				return err
			}
			snap, err := loop.Cycle(cmd.Context())
			if err != nil {
				return fmt.Errorf("read lag: %w", err)
			}
			for _, e := range snap.Errors {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning:", e.Error())
			}
			if len(lf.groups) > 0 && len(snap.Groups) == 0 {
				return fmt.Errorf("%w: no group matches --group %s", lagexporter.ErrUnknownGroup, strings.Join(lf.groups, ", "))
			}
			return printSnapshot(cmd.OutOrStdout(), snap, lf.output, "")
		},
	}
	lf.register(cmd, true)
	cmd.AddCommand(newLagRecordCmd(), newLagEvalCmd())
	return cmd
}

// printSnapshot writes a snapshot as a table (one row per group-partition) or as one JSON object per line.
func printSnapshot(w io.Writer, s *lagexporter.Snapshot, output, title string) error {
	if output == "json" {
		return json.NewEncoder(w).Encode(s)
	}
	if title != "" {
		if _, err := fmt.Fprintln(w, title); err != nil {
			return err
		}
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GROUP\tTYPE\tTOPIC\tSUBTOPOLOGY\tPARTITION\tCOMMITTED\tEND\tLAG\tTIME-LAG\tRETENTION-LEFT\tCATCH-UP\tSTATUS\tFLAGS")
	for _, g := range s.Groups {
		if len(g.Partitions) == 0 && g.Error != "" { // groups with no partition in scope are not shown
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%s\terror: %s\n", g.Group, groupType(&g), g.Status, g.Error)
		}
		for _, p := range g.Partitions {
			committed, end, lag, tl := "-", "-", "-", "-"
			if p.HasCommit {
				committed = fmt.Sprint(p.Committed)
			}
			if p.Known {
				end, lag = fmt.Sprint(p.End), fmt.Sprint(p.Lag)
			}
			if p.TimeLagKnown {
				tl = fmt.Sprintf("%.3fs", p.TimeLag.Seconds())
			}
			flags := p.Flags.String()
			if flags == "" {
				flags = "-"
			}
			sub := "-" // streams groups: the subtopology reading the topic, "/internal" for a repartition topic
			if p.Subtopology() != "" {
				sub = p.Subtopology()
				if p.Internal() {
					sub += "/internal"
				}
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", g.Group, groupType(&g), p.Topic, sub, p.Partition,
				committed, end, lag, tl, retentionLeft(p.Retention), catchUp(p.CatchUp), p.Status, flags)
		}
	}
	return tw.Flush()
}

// retentionLeft prints a retention margin: the time left, the bytes left, both, or "-" when retention does not apply.
func retentionLeft(m lagexporter.RetentionMargin) string {
	var parts []string
	if m.TimeKnown {
		parts = append(parts, m.Time.Round(time.Second).String())
	}
	if m.BytesKnown {
		parts = append(parts, fmt.Sprintf("%dB", m.Bytes))
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, ",")
}

// catchUp prints a catch-up estimate: "0s" caught up, the ETA while draining, "never" while the lag does not fall.
func catchUp(c lagexporter.CatchUp) string {
	switch c.State {
	case lagexporter.CatchUpCaughtUp:
		return "0s"
	case lagexporter.CatchUpDraining:
		return c.ETA.Round(time.Second).String()
	case lagexporter.CatchUpNotDraining:
		return "never"
	}
	return "-"
}

// groupType is the group's type for display; snapshots of old timelines have none and are classic groups.
func groupType(g *lagexporter.GroupLag) string {
	if g.GroupType == "" {
		return lagexporter.GroupClassic
	}
	return g.GroupType
}
