package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/layout"
	"github.com/volume-agent/volume-agent/internal/metrics"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins"
	"github.com/volume-agent/volume-agent/internal/populator"
	"github.com/volume-agent/volume-agent/internal/reconciler"
	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/source/manifest"
	"github.com/volume-agent/volume-agent/internal/status"
)

// stuckAfter is how long a loop may leave a change unprocessed before
// /healthz fails.
const stuckAfter = 30 * time.Second

// runAgent wires the components and runs them until ctx ends.
func runAgent(ctx context.Context, o options, log *zap.Logger) error {
	mounter, err := chooseMounter(o, log)
	if err != nil {
		return err
	}
	root, err := filepath.Abs(o.rootDir)
	if err != nil {
		return fmt.Errorf("--root-dir: %w", err)
	}
	if err := os.MkdirAll(root, 0o750); err != nil {
		return fmt.Errorf("create --root-dir: %w", err)
	}
	a := &agent{}
	a.desired = dsw.New(func() { a.reconciler.Notify(); a.server.Notify() })
	a.actual = asw.New(func() { a.server.Notify() })
	registry := plugins.Default(plugins.Config{Mounter: mounter})
	src, err := manifest.New(manifest.Config{Dir: o.manifests, NodeName: o.nodeName, Logger: log, OnChange: func() { a.populator.Notify() }})
	if err != nil {
		return err
	}
	sources := []source.Source{src}
	a.populator = populator.New(populator.Config{Sources: sources, Desired: a.desired, Plugins: registry, Logger: log})
	worlds := status.Worlds{Desired: a.desired, Actual: a.actual}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg, worlds.VolumesByState)
	a.reconciler = reconciler.New(reconciler.Config{Desired: a.desired, Actual: a.actual, Plugins: registry, Root: layout.Root(root), Logger: log, Observer: m})
	a.server = status.New(status.Config{Addr: o.statusAddr, Worlds: worlds, Sources: sources, Recovered: a.reconciler.Recovered, Healthy: a.healthy, Gatherer: reg, Logger: log})
	log.Info("volume-agent starting", zap.String("node", o.nodeName), zap.String("rootDir", root), zap.String("manifests", o.manifests))
	return a.run(ctx, src)
}

// agent holds the long-running components.
type agent struct {
	desired    *dsw.World
	actual     *asw.World
	populator  *populator.Populator
	reconciler *reconciler.Reconciler
	server     *status.Server
}

// run runs every loop under one errgroup; the first to fail stops the rest.
func (a *agent) run(ctx context.Context, sources ...source.Source) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, src := range sources {
		g.Go(func() error { return named("source "+src.Name(), src.Run(ctx)) })
	}
	g.Go(func() error { return named("populator", a.populator.Run(ctx)) })
	g.Go(func() error { return named("reconciler", a.reconciler.Run(ctx)) })
	g.Go(func() error { return named("status endpoint", a.server.Run(ctx)) })
	return g.Wait()
}

func (a *agent) healthy() error {
	return errors.Join(a.populator.Stuck(stuckAfter), a.reconciler.Stuck(stuckAfter))
}

func named(what string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// chooseMounter refuses to run without root unless --unprivileged says to.
func chooseMounter(o options, log *zap.Logger) (mount.Mounter, error) {
	if o.unprivileged {
		log.Warn("running unprivileged: nothing is mounted; memory-backed emptyDir, secret and projected volumes are written to disk, not tmpfs")
		return mount.Unprivileged{}, nil
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("volume-agent mounts tmpfs volumes and must run as root; run it with sudo, or pass --unprivileged to run without mounting (secrets then land on disk)")
	}
	return mount.System{}, nil
}
