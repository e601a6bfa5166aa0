package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.uber.org/zap"
	"golang.org/x/sync/errgroup"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/binder"
	"github.com/volume-agent/volume-agent/internal/dsw"
	"github.com/volume-agent/volume-agent/internal/layout"
	"github.com/volume-agent/volume-agent/internal/memtrim"
	"github.com/volume-agent/volume-agent/internal/metrics"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins"
	"github.com/volume-agent/volume-agent/internal/plugins/hostpath"
	"github.com/volume-agent/volume-agent/internal/populator"
	"github.com/volume-agent/volume-agent/internal/procpool"
	"github.com/volume-agent/volume-agent/internal/reconciler"
	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/source/manifest"
	"github.com/volume-agent/volume-agent/internal/status"
	"github.com/volume-agent/volume-agent/internal/subpath"
	volumeusage "github.com/volume-agent/volume-agent/internal/usage"
)

// stuckAfter is how long a loop may leave a change unprocessed before
// /healthz fails.
const stuckAfter = 30 * time.Second

// runner is a long-running component: Run blocks until ctx ends.
type runner interface {
	Run(ctx context.Context) error
}

// agent holds the long-running components.
type agent struct {
	desired    *dsw.World
	actual     *asw.World
	populator  *populator.Populator
	reconciler *reconciler.Reconciler
	server     *status.Server
	sources    []source.Source
	// binder binds the manifests' claims; nil without --manifests.
	binder *binder.Source
	// provs are the dynamic provisioners (set before anything runs).
	provs *provisioners
	// usage measures the volumes' usage in the background.
	usage *volumeusage.Usage
	// others run beside the loops (token manager, event recorder).
	others map[string]runner
	// csiHealth, when the CSI driver is on, says what is wrong with it
	// (its registration refused by the kubelet) for /healthz.
	csiHealth func() error
	// trim returns the heap's free pages once a burst of changes settles.
	trim *memtrim.Trimmer
}

// runAgent wires the components and runs them until ctx ends. A root that
// belongs to another node is refused before anything is created; the node
// is recorded once everything that can refuse a start has passed, and
// before any loop runs.
func runAgent(ctx context.Context, o options, log *zap.Logger) error {
	mounter, err := chooseMounter(o, log)
	if err != nil {
		return err
	}
	root, err := openRoot(o.rootDir, o.nodeName)
	if err != nil {
		return err
	}
	// Held until the agent has stopped: a second agent on this root would
	// find these pods on disk, in none of its sources, and tear them down.
	if err := lockWaitFromEnv(); err != nil {
		return err
	}
	rootLock, err := lockDir("--root-dir", root, log)
	if err != nil {
		return err
	}
	defer func() { _ = rootLock.Close() }()
	a := &agent{others: map[string]runner{}, trim: memtrim.New(memtrim.Config{})}
	a.desired = dsw.New(func() { a.reconciler.Notify(); a.server.Notify(); a.usage.Notify(); a.trim.Touch() })
	a.actual = asw.New(func() {
		a.trim.Touch()
		a.server.Notify()
		a.usage.Notify()
		a.notifyActual()
	})
	notify := func() { a.populator.Notify() }
	provs, err := newProvisioners(ctx, o, root, mounter, a.inUse, log)
	if err != nil {
		return err
	}
	a.provs = provs
	cluster, err := newCluster(o, log, notify, a.notifyPod, provs, status.Worlds{Desired: a.desired, Actual: a.actual}.Ready)
	if err != nil {
		return err
	}
	a.usage = volumeusage.New(volumeusage.Config{Targets: usageTargets{desired: a.desired, actual: a.actual, hostRoot: o.hostRoot, localRoot: provs.localRoot}, Period: o.statsPeriod, Logger: log,
		Reporter: sizeLimitReporter{desired: a.desired, events: cluster.sizeLimitRecorder(), log: log.Named("usage")}})
	if err := a.addSources(o, root, log, cluster, notify, provs); err != nil {
		return err
	}
	checkers, err := hostPathCheckers(log)
	if err != nil {
		return err
	}
	a.others["host path checkers"] = checkers
	if err := a.addCSI(o, provs, log); err != nil {
		return err
	}
	registry := plugins.Default(plugins.Config{Mounter: mounter, Root: layout.Root(root), NodeName: o.nodeName, Logger: log.Named("plugins"), Tokens: cluster.tokenSource(), HostRoot: o.hostRoot,
		HostPathCheckers: checkers, NoSwap: probeNoSwap(mounter, log), LocalRoot: provs.localRoot})
	a.populator = populator.New(populator.Config{Sources: a.sources, Desired: a.desired, Actual: a.actual, PodDirs: a.actual, Plugins: registry, Logger: log,
		OnPodGone: cluster.forgetPod, Recorder: cluster.problemRecorder(), VolatileByPod: true})
	worlds := status.Worlds{Desired: a.desired, Actual: a.actual, Usage: a.usage}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := metrics.New(reg, worlds.VolumesByState, metrics.Sources(a.sources), metrics.Uncertain(a.actual),
		metrics.Terminating(worlds), metrics.VolumeStats(a.usage), metrics.HostPathCheckers(checkers.Stats))
	a.reconciler = reconciler.New(reconciler.Config{Desired: a.desired, Actual: a.actual, Plugins: registry,
		Root: layout.Root(root), Logger: log, Observer: m, Recorder: cluster.recorder(), OnRecovered: a.recovered,
		CheckPeriod: o.checkPeriod, MountedNoSwap: mountedNoSwap(mounter), MountedReadOnly: mountedReadOnly(mounter), SubPaths: subPaths(layout.Root(root), o.hostRoot, mounter, checkers)})
	lns, err := listen(o)
	if err != nil {
		return err
	}
	cfg := status.Config{Addr: o.statusAddr, Listener: lns.status, Worlds: worlds, Sources: a.sources, Claims: a.claimLister(),
		Recovered: a.reconciler.Recovered, Healthy: a.healthy, Warnings: a.provs.warnings, Gatherer: reg, Logger: log, Profiling: o.profiling, OnIdle: a.trim.Touch}
	if a.binder != nil {
		if cfg.OperatorToken, err = writeOperatorToken(root); err != nil {
			lns.close()
			return err
		}
		cfg.Deleter = a.binder
	}
	a.server = status.New(cfg)
	if lns.metrics != nil {
		a.others["metrics endpoint"] = metricsServer{ln: lns.metrics, gatherer: reg, log: log.Named("metrics")}
	}
	if lns.healthz != nil {
		a.others["health endpoint"] = healthServer{ln: lns.healthz, server: a.server, log: log.Named("health")}
	}
	if err := recordNode(root, o.nodeName); err != nil {
		lns.close()
		return err
	}
	log.Info("volume-agent starting", zap.String("node", o.nodeName), zap.String("rootDir", root),
		zap.String("manifests", o.manifests), zap.Bool("cluster", cluster != nil))
	return a.run(ctx)
}

// listeners are the agent's endpoints, bound before the agent starts.
type listeners struct{ status, metrics, healthz net.Listener }

// listen binds --status-addr, --metrics-addr and --healthz-addr: a port in
// use, or a socket another agent serves, refuses the start before the node
// is recorded and before anything runs.
func listen(o options) (_ listeners, retErr error) {
	var l listeners
	defer func() {
		if retErr != nil {
			l.close()
		}
	}()
	var err error
	if l.status, err = listenAddr(o.statusAddr, o.socketGID); err != nil {
		return listeners{}, fmt.Errorf("status endpoint: %w", inUse(err, "status-addr", o.statusAddr))
	}
	if o.metricsAddr != "" {
		if l.metrics, err = listenAddr(o.metricsAddr, o.socketGID); err != nil {
			return listeners{}, fmt.Errorf("metrics endpoint: %w", inUse(err, "metrics-addr", o.metricsAddr))
		}
	}
	if o.healthzAddr != "" {
		if l.healthz, err = listenAddr(o.healthzAddr, o.socketGID); err != nil {
			return listeners{}, fmt.Errorf("health endpoint: %w", inUse(err, "healthz-addr", o.healthzAddr))
		}
	}
	return l, nil
}

// inUse says, for a port in use, which flag gave it and how to find who
// holds it: most often another agent, started twice or not stopped yet.
// Any other error of listening on --flag addr is returned as it is.
func inUse(err error, flag, addr string) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return err
	}
	_, port, _ := net.SplitHostPort(addr)
	return fmt.Errorf("--%s %s: the port is in use: another volume-agent may be running "+
		"(volume-agent status --addr %s answers if so; ss -ltnp 'sport = :%s' names the process that holds it): "+
		"stop it, or give --%s another address: %w", flag, addr, addr, port, flag, err)
}

// listenAddr binds addr, as status.ParseAddr reads it (validated with the
// flags).
func listenAddr(addr string, gid int) (net.Listener, error) {
	a, err := status.ParseAddr(addr)
	if err != nil {
		return nil, err
	}
	return status.Listen(a, gid)
}

// close closes the listeners that no Run took over.
func (l listeners) close() {
	for _, ln := range []net.Listener{l.status, l.metrics, l.healthz} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// addSources creates the manifest source, behind the binder that binds its
// claims to its PersistentVolumes, and, in cluster mode, the API source.
func (a *agent) addSources(o options, root string, log *zap.Logger, c *cluster, notify func(), provs *provisioners) error {
	if o.manifests != "" {
		var b *binder.Source
		src, err := manifest.New(manifest.Config{Dir: o.manifests, NodeName: o.nodeName, Logger: log, OnChange: func() { b.Notify() }})
		if err != nil {
			return err
		}
		b, err = binder.New(binder.Config{Inner: src, StatePath: filepath.Join(root, "claims.json"), NodeName: o.nodeName, Logger: log, OnChange: notify,
			Provisioners: provs.forBinder(), ReclaimDelay: o.reclaimDelay, InUse: a.inUse, PauseAfterStorage: provs.pauseAfterStorage(),
			Snapshotters: provs.snapshotters(),
			Traces:       func() ([]string, error) { return bindingTraces(layout.Root(root), provs.localRoot, c != nil) }})
		if err != nil {
			return err
		}
		a.sources, a.binder = append(a.sources, b), b
	}
	if c != nil {
		a.sources = append(a.sources, c.source)
		for name, r := range c.runners() {
			a.others[name] = r
		}
	}
	return nil
}

// run runs every loop under one errgroup; the first to fail stops the rest.
func (a *agent) run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, src := range a.sources {
		g.Go(func() error { return named("source "+src.Name(), src.Run(ctx)) })
	}
	for name, r := range a.others {
		g.Go(func() error { return named(name, r.Run(ctx)) })
	}
	g.Go(func() error { return named("populator", a.populator.Run(ctx)) })
	g.Go(func() error { return named("reconciler", a.reconciler.Run(ctx)) })
	g.Go(func() error { return named("status endpoint", a.server.Run(ctx)) })
	g.Go(func() error { return named("volume usage", a.usage.Run(ctx)) })
	return g.Wait()
}

// inUse reports whether a pod on this node has the PersistentVolume pv set
// up (claim volumes are named after their PV), or whether that is not known
// yet: before the actual state is rebuilt from disk at start.
func (a *agent) inUse(pv string) bool {
	return !a.reconciler.Recovered() || a.actual.HasVolume(pv)
}

// recovered is called once the actual state is rebuilt: the populator
// looks again, and so do the binder and the provisioners if they wait to
// know what is in use.
func (a *agent) recovered() {
	a.populator.Notify()
	a.notifyActual()
}

// notifyActual tells those who wait for a PV to be torn down that the
// actual state changed.
func (a *agent) notifyActual() {
	if a.binder != nil {
		a.binder.NotifyActual()
	}
	if a.provs != nil {
		a.provs.notifyActual()
	}
}

func (a *agent) healthy() error {
	errs := []error{a.populator.Stuck(stuckAfter), a.reconciler.Stuck(stuckAfter)}
	if a.binder != nil {
		errs = append(errs, a.binder.Stuck(stuckAfter))
	}
	if a.csiHealth != nil {
		errs = append(errs, a.csiHealth())
	}
	return errors.Join(errs...)
}

// claimLister returns what /v1/claims lists: the binder's claims, and the
// released PVs the cluster provisioners are to delete; a nil interface when
// there is neither.
func (a *agent) claimLister() status.Claims {
	if a.binder == nil && a.provs == nil {
		return nil
	}
	return claimLister{binder: a.binder, provs: a.provs, usage: a.usage}
}

// claimLister lists the claims for /v1/claims.
type claimLister struct {
	binder *binder.Source // nil without --manifests
	provs  *provisioners  // nil without --provisioners
	usage  *volumeusage.Usage
}

// Snapshots lists the binder's VolumeSnapshots (none without --manifests).
func (l claimLister) Snapshots() []binder.SnapshotStatus {
	if l.binder == nil {
		return nil
	}
	return l.binder.Snapshots()
}

func (l claimLister) Claims() []binder.ClaimStatus {
	var out []binder.ClaimStatus
	if l.binder != nil {
		out = l.binder.Claims()
	}
	if l.provs != nil {
		out = append(out, l.provs.pending()...)
	}
	return l.withLimits(out)
}

// withLimits says on each claim whose volume's size limit is not
// enforced (a btrfs qgroup limit gone: quotas off) why, from the latest
// measurements of its pods' volumes.
func (l claimLister) withLimits(claims []binder.ClaimStatus) []binder.ClaimStatus {
	if l.usage == nil {
		return claims
	}
	why := map[[2]string]string{}
	for _, s := range l.usage.Stats() {
		if s.Claim != "" && s.NotEnforced != "" {
			why[[2]string{s.Namespace, s.Claim}] = s.NotEnforced
		}
	}
	for i, c := range claims {
		claims[i].LimitNotEnforced = why[[2]string{c.Namespace, c.Name}]
	}
	return claims
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
		log.Warn("running unprivileged: nothing is mounted; memory-backed emptyDir, secret and projected volumes are written to disk, not tmpfs, and fsGroup ownership is not applied")
		return mount.Unprivileged{}, nil
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("volume-agent mounts tmpfs volumes and must run as root; run it with sudo, or pass --unprivileged to run without mounting (secrets then land on disk)")
	}
	return mount.System{}, nil
}

// subPaths is the preparer of the pods' subPath mounts, which opens them
// in the checker processes; none without mounts (--unprivileged).
func subPaths(root layout.Root, hostRoot string, mounter mount.Mounter, checkers subpath.Files) reconciler.SubPaths {
	if !mount.Privileged(mounter) {
		return nil
	}
	return subpath.Preparer{Root: root, Mounter: mounter, HostRoot: hostRoot, Opener: &subpath.Opener{Files: checkers}}
}

// mountedReadOnly is how the reconciler learns at start whether the mount
// of each volume it finds on disk is read-only; nil for an agent that
// mounts nothing.
func mountedReadOnly(mounter mount.Mounter) func(context.Context, []string) (map[string]bool, error) {
	if !mount.Privileged(mounter) {
		return nil
	}
	return mount.ReadOnlyMounts
}

// hostPathCheckers is the pool of processes that check host paths and
// open subPaths (passing the descriptors back): this binary again, as
// hostpath.ServerArg; none runs before the first check. The pool's bounds
// are procpool's defaults: 2 children kept, up to 16 while every one has
// worked on a request for a second, each request abandoned after 5 s, and
// no new request while 32 abandoned children are stuck.
// They do not share the agent's standard error: a child stuck on hung
// storage would hold it open, and whoever reads the agent's output (a
// container runtime, a test) would wait for the child, not the agent.
func hostPathCheckers(log *zap.Logger) (*procpool.Pool, error) {
	return procpool.New(procpool.Config{Command: []string{selfExe, hostpath.ServerArg}, PassFiles: true, Logger: log.Named("checkers")})
}

// runCheckers is a checker process's main (hostpath.ServerArg): it answers
// host path checks and subPath opens, passing the opened descriptors on
// procpool.FilesFD, until the agent closes its end of the pipe.
func runCheckers() int {
	sock := os.NewFile(procpool.FilesFD, "files")
	err := procpool.ServeFiles(os.Stdin, os.Stdout, sock, func(req []byte) ([]byte, int) {
		if subpath.IsOpenRequest(req) {
			return subpath.AnswerOpen(req)
		}
		return hostpath.Answer(req), -1
	}, subpath.FailedOpen)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", hostpath.ServerArg, err)
		return 2
	}
	return 0
}
