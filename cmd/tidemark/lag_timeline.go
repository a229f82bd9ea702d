package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/tidemark/tidemark/internal/confload"
	"github.com/tidemark/tidemark/lagexporter"
	"github.com/tidemark/tidemark/lagexporter/timeline"
)

// newLagRecordCmd is `tidemark lag record`: poll a live cluster and write every observation to a timeline file.
func newLagRecordCmd() *cobra.Command {
	var lf lagFlags
	var out string
	var interval time.Duration
	var count int
	cmd := &cobra.Command{
		Use:   "record",
		Short: "Poll a live cluster and write each observation to a timeline file (docs/lag-timeline.md)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("--out: required")
			}
			if interval <= 0 { // time.NewTicker panics on a non-positive interval
				return fmt.Errorf("--interval: must be > 0, got %s", interval)
			}
			if count < 0 {
				return fmt.Errorf("--count: must be >= 0 (0: until interrupted), got %d", count)
			}
			cfg, err := lf.config(nil)
			if err != nil {
				return err
			}
			cfg.PollInterval = interval
			r, err := lf.reader(cmd.Context())
			if err != nil {
				return err
			}
			defer r.Close()
			f, err := os.Create(out)
			if err != nil {
				return fmt.Errorf("create timeline: %w", err)
			}
			defer f.Close()
			block := &timeline.ConfigBlock{Cluster: cfg.Cluster, GroupAllow: cfg.GroupAllow, GroupDeny: cfg.GroupDeny,
				TopicAllow: cfg.TopicAllow, TopicDeny: cfg.TopicDeny, Groups: cfg.Groups}
			tw := timeline.NewWriter(f, block)
			loop, err := lagexporter.NewLoop(cfg, r, time.Now)
			if err != nil {
				return err
			}
			loop.SetRecorder(tw.Write)
			ctx := cmd.Context()
			t := time.NewTicker(interval)
			defer t.Stop()
			for n := 0; count == 0 || n < count; n++ {
				if n > 0 {
					select {
					case <-ctx.Done():
						return tw.Flush()
					case <-t.C:
					}
				}
				if _, err := loop.Cycle(ctx); err != nil {
					fmt.Fprintln(cmd.ErrOrStderr(), "warning: cycle failed:", err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "recorded poll %d\n", n+1)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			return f.Close()
		},
	}
	lf.register(cmd, true)
	cmd.Flags().StringVar(&out, "out", "", "timeline file to write (JSON lines)")
	cmd.Flags().DurationVar(&interval, "interval", 30*time.Second, "time between polls")
	cmd.Flags().IntVar(&count, "count", 0, "number of polls (0: until interrupted)")
	return cmd
}

// newLagEvalCmd is `tidemark lag eval FILE`: replay a timeline through the live loop's code and print every poll.
func newLagEvalCmd() *cobra.Command {
	var lf lagFlags
	var maxSize int64
	cmd := &cobra.Command{
		Use:   "eval FILE",
		Short: "Replay a timeline file through the lag exporter's poll loop and print each poll's result",
		Long: "eval reads a timeline (docs/lag-timeline.md), plays each line as one poll of the cluster through the same\n" +
			"loop code the live exporter runs (the line's time is the clock), and prints the result of every poll.\n" +
			"The timeline's own config line applies; flags add to it.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if lf.output != "table" && lf.output != "json" {
				return fmt.Errorf("--output: %q is not one of table, json", lf.output)
			}
			f, err := os.Open(args[0])
			if err != nil {
				return fmt.Errorf("open timeline: %w", err)
			}
			defer f.Close()
			in := &confload.CappedReader{R: f, Name: args[0], Limit: maxSize, Flag: "--max-size"}
			tl, err := timeline.Read(in, args[0])
			if err := in.Exceeded(); err != nil {
				return err // whatever the parser made of the bytes it got: the file is not a timeline
			}
			if err != nil {
				return err
			}
			lf.cluster = "default"
			cfg, err := lf.config(tl.Config)
			if err != nil {
				return err
			}
			return timeline.Play(cmd.Context(), tl, cfg, func(p timeline.Poll) error {
				if p.Err != nil { // a recorded cycle that read nothing: counted, nothing published
					if lf.output == "json" {
						return nil
					}
					_, err := fmt.Fprintf(cmd.OutOrStdout(), "# %s:%d poll failed: %v\n", args[0], p.Line, p.Err)
					return err
				}
				s := p.Snapshot
				return printSnapshot(cmd.OutOrStdout(), s, lf.output,
					fmt.Sprintf("# %s:%d poll %d at %s", args[0], p.Line, s.Seq, s.Time.Format(time.RFC3339Nano)))
			})
		},
	}
	lf.register(cmd, false)
	cmd.Flags().Int64Var(&maxSize, "max-size", defaultMaxTimelineBytes, "the largest timeline file read, in bytes")
	return cmd
}
