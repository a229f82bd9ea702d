// Command tidemark is Tidemark's single binary: the daemon (`run`), the one-shot lag table and timeline tools (`lag`),
// schema migration (`migrate`) and reports. This package is wiring only: flags, config, signals; the work lives in the
// library packages.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// subcommands is filled by each command's file (init), so that each subcommand lives in a file of its own.
var subcommands []func() *cobra.Command

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "tidemark",
		Short:         "Kafka latency and consumer-lag analytics, corrected for clock skew and replays",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	for _, sub := range subcommands {
		root.AddCommand(sub())
	}
	return root
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tidemark:", err)
		os.Exit(1)
	}
}
