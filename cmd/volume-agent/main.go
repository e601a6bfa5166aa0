// Command volume-agent is a node agent that mounts the volumes of the pods
// on its node — emptyDir, configMap, secret, downwardAPI, projected and
// hostPath — under its root directory, keeps them up to date and tears them
// down when the pods go. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"go.uber.org/zap"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// run returns the process exit code: 0 after a clean shutdown, 1 when the
// agent could not run, 2 for bad flags.
func run(args []string) int {
	opts, err := parseFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "volume-agent:", err)
		return 2
	}
	logger, err := newLogger(opts.logLevel, opts.logFormat)
	if err != nil {
		fmt.Fprintln(os.Stderr, "volume-agent:", err)
		return 2
	}
	defer func() { _ = logger.Sync() }()
	routeKlog(logger)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := runAgent(ctx, opts, logger); err != nil {
		logger.Error("volume-agent stopped", zap.Error(err))
		return 1
	}
	logger.Info("volume-agent stopped; volumes stay mounted")
	return 0
}
