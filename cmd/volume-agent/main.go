// Command volume-agent is a node agent that mounts the volumes of the pods
// on its node — emptyDir, configMap, secret, downwardAPI, projected and
// hostPath — under its root directory, keeps them up to date and tears them
// down when the pods go. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/volume-agent/volume-agent/internal/plugins/hostpath"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == hostpath.CheckerArg {
		os.Exit(hostpath.RunChecker(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == hostpath.ServerArg {
		os.Exit(runCheckers())
	}
	if code, ok := runSubcommand(os.Args[1:], stdEnv()); ok {
		os.Exit(code) // status, claims, wait, version, help: see cli.go
	}
	os.Exit(run(stdEnv(), os.Args[1:]))
}

// selfExe starts this binary again, the one running even if its file was
// replaced or removed since: hostPath checks run in such children.
const selfExe = "/proc/self/exe"

// run returns the process exit code: 0 after a clean shutdown (or
// --help, --version), 1 when the agent could not run, 2 for bad flags.
func run(env cmdEnv, args []string) int {
	opts, err := parseFlags(args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		writeAgentUsage(env.stderr)
		return exitOK
	case err != nil:
		return failure(env, "", exitUsage, err)
	case opts.version:
		return runVersion(env, nil)
	}
	if !opts.profiling {
		// Sampling allocations for a heap profile nobody can fetch costs
		// the profile's 1.4 MiB bucket table on the first sample.
		runtime.MemProfileRate = 0
	}
	logger, err := newLogger(opts.logLevel, opts.logFormat)
	if err != nil {
		return failure(env, "", exitUsage, err)
	}
	defer func() { _ = logger.Sync() }()
	routeKlog(logger)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	defer context.AfterFunc(ctx, func() { exitAfter(exitDeadline, logger) })()
	if err := runAgent(ctx, opts, logger); err != nil {
		logger.Error("volume-agent stopped", zap.Error(err))
		return 1
	}
	logger.Info("volume-agent stopped; volumes stay mounted")
	return 0
}

// exitDeadline bounds the time from SIGTERM to exit, whatever storage
// does: an operation stuck in the kernel on a hung NFS or FUSE server can
// keep a goroutine from ever returning. Well inside the DaemonSet's
// termination grace period (30 s), so that the agent is never SIGKILLed in
// the middle of a write it could have finished.
const exitDeadline = 8 * time.Second

// exitAfter exits the process d from now unless it has exited by then.
// Volumes stay mounted; an operation cut short is rebuilt from disk as
// Uncertain at the next start and set up again, which is idempotent.
func exitAfter(d time.Duration, logger *zap.Logger) {
	time.AfterFunc(d, func() {
		logger.Error("volume-agent did not stop in time; exiting with operations still running (volumes stay mounted)", zap.Duration("deadline", d))
		_ = logger.Sync()
		os.Exit(0)
	})
}
