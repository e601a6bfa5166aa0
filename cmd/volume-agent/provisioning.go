package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/volume-agent/volume-agent/internal/binder"
	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/nfs"
	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/provisioner/capacity"
	"github.com/volume-agent/volume-agent/internal/provisioner/local"
	"github.com/volume-agent/volume-agent/internal/provisioner/nfssubdir"
	"github.com/volume-agent/volume-agent/internal/provisioner/storagecapacity"
)

// pauseEnv, for fault tests only, makes the provisioners wait this long
// between making a volume's storage and creating its PV.
const pauseEnv = "VOLUME_AGENT_TEST_PROVISION_PAUSE"

// provisioners are the dynamic provisioners --provisioners turns on.
type provisioners struct {
	local *local.Provisioner     // nil when off
	nfs   *nfssubdir.Provisioner // nil when off
	pause time.Duration
	// leaseNS and identity are for the nfs-subdir provisioner's Lease.
	leaseNS, identity string
	// rootLock holds the local path root for this agent alone while it
	// is open: for the life of the process.
	rootLock *os.File
	// localRoot is the local path root, resolved; "" when the local
	// provisioner is off.
	localRoot string
	// inUse and delay are the cluster controllers' Config.InUse and
	// Config.ReclaimDelay.
	inUse func(pv string) bool
	delay time.Duration

	mu sync.Mutex
	// live are the cluster controllers running, told of changes of the
	// actual state (notifyActual).
	live map[*provisioner.Controller]bool // guarded by mu
	// room, in cluster mode, publishes the local provisioner's room;
	// told when a volume was made, grown or deleted.
	room *storagecapacity.Publisher // guarded by mu
	// driverCheck, in cluster mode with the CSI endpoint on, says what is
	// wrong with the CSIDriver object.
	driverCheck *storagecapacity.DriverCheck // guarded by mu
}

// newProvisioners builds the provisioners --provisioners names. inUse says
// whether a pod on this node has a PV set up (or whether that is unknown).
func newProvisioners(ctx context.Context, o options, root string, mounter mount.Mounter, inUse func(string) bool, log *zap.Logger) (*provisioners, error) {
	p := &provisioners{leaseNS: o.leaseNS, identity: o.nodeName, inUse: inUse, delay: o.reclaimDelay,
		live: map[*provisioner.Controller]bool{}}
	if v := os.Getenv(pauseEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return nil, fmt.Errorf("$%s: %w", pauseEnv, err)
		}
		p.pause = d
	}
	if o.provisioner(provLocal) {
		localRoot, err := resolveLocalPathRoot(o.localPathRoot)
		if err != nil {
			return nil, err
		}
		if within(localRoot, root) || within(root, localRoot) {
			return nil, fmt.Errorf("--local-path-root %s and --root-dir %s must not contain each other (resolved: %s and %s): "+
				"the agent removes what it set up under --root-dir, and provisioned data must outlive it", o.localPathRoot, o.rootDir, localRoot, root)
		}
		if p.rootLock, err = lockDir("--local-path-root", localRoot, log); err != nil {
			return nil, err
		}
		p.localRoot = localRoot
		cfg := local.Config{Root: localRoot, NodeName: o.nodeName, Mounter: mounter, Logger: log, OnChange: p.roomChanged}
		cfg.Capacity, cfg.NoCapacity = openCapacity(ctx, o, localRoot, mounter, log)
		l, err := local.New(cfg)
		if err != nil {
			return nil, err
		}
		p.local = l
	}
	if o.provisioner(provNFSSubdir) {
		n, err := nfssubdir.New(nfssubdir.Config{RootDir: root, Exports: nfs.New(log.Named("nfs-subdir")), Mounter: mounter, Logger: log})
		if err != nil {
			return nil, err
		}
		p.nfs = n
	}
	return p, nil
}

// openCapacity opens the capacity backend of the local path root and
// recovers its volumes (finishing or rolling back what a crash cut short,
// mounting image volumes again) before any controller or binder runs. A
// root that cannot enforce sizes is no reason to stop the agent: classes
// with enforce "false" still work, and the others are refused with the
// reason, returned second, rather than served unenforced.
func openCapacity(ctx context.Context, o options, localRoot string, mounter mount.Mounter, log *zap.Logger) (capacity.Backend, error) {
	if o.unprivileged {
		err := errors.New("the agent runs --unprivileged and mounts nothing")
		log.Warn("capacity not enforced on the local path root", zap.String("root", localRoot), zap.Error(err))
		return nil, err
	}
	b, err := capacity.Open(ctx, capacity.Config{Root: localRoot, Logger: log, Mounter: mounter})
	if err != nil {
		log.Warn("capacity not enforced on the local path root", zap.String("root", localRoot), zap.Error(err))
		return nil, err
	}
	vols, err := b.Recover(ctx)
	failed := 0
	if err != nil {
		// Each volume is recovered on its own: those that failed are
		// named here, and the next start tries again.
		log.Warn("volumes of enforced capacity not all recovered", zap.String("root", localRoot), zap.Error(err))
		failed = len(joined(err))
	}
	// volumes counts every volume the root holds, recovered or not: one
	// whose recovery failed is there all the same, with its data.
	log.Info("local path root opened for enforced capacity", zap.String("root", localRoot), zap.String("backend", b.Kind()),
		zap.Int("volumes", len(vols)+failed), zap.Int("notRecovered", failed))
	return b, nil
}

// joined returns the errors err joins (errors.Join), or err alone.
func joined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok { //nolint:errorlint // the join itself, not one in its chain
		return j.Unwrap()
	}
	return []error{err}
}

// forBinder lists the provisioners manifest mode's binder uses.
func (p *provisioners) forBinder() []provisioner.Provisioner {
	var out []provisioner.Provisioner
	if p.local != nil {
		out = append(out, p.local)
	}
	if p.nfs != nil {
		out = append(out, p.nfs)
	}
	return out
}

// pauseAfterStorage is $VOLUME_AGENT_TEST_PROVISION_PAUSE (zero without
// provisioners).
func (p *provisioners) pauseAfterStorage() time.Duration {
	if p == nil {
		return 0
	}
	return p.pause
}

// runners lists the controllers cluster mode runs: the local provisioner
// on every agent, for the claims scheduled to its node, and the nfs-subdir
// provisioner on the one agent that holds its Lease. With the CSI endpoint
// on, the CSI driver's external-provisioner serves the classes that name
// local.volume-agent.io and publishes the node's room: the local
// controller keeps the legacy name and the in-tree PVs, and the storage
// capacity objects an earlier run published are withdrawn.
func (p *provisioners) runners(client kubernetes.Interface, o options, log *zap.Logger) (map[string]runner, error) {
	r := map[string]runner{}
	if p.local != nil {
		cfg := provisioner.Config{Client: client, Provisioner: p.local, Node: o.nodeName, Logger: log}
		if o.csiEndpoint != "" {
			cfg.CSIDriver = provisioner.LocalName
		}
		c, err := provisioner.New(p.config(cfg))
		if err != nil {
			return nil, err
		}
		r["local provisioner"] = p.tracked(c)
		room, err := p.capacityRunner(client, o, log)
		if err != nil {
			return nil, err
		}
		r["local storage capacity"] = room
		if o.csiEndpoint != "" {
			check, err := storagecapacity.NewDriverCheck(storagecapacity.DriverCheckConfig{Client: client, Driver: provisioner.LocalName, Logger: log})
			if err != nil {
				return nil, err
			}
			p.mu.Lock()
			p.driverCheck = check
			p.mu.Unlock()
			r["CSIDriver check"] = check
		}
	}
	if p.nfs != nil {
		r["nfs-subdir provisioner"] = leadingNFS{p: p, client: client, log: log}
	}
	return r, nil
}

// capacityRunner publishes the local provisioner's room, or with the CSI
// endpoint on withdraws what an earlier run published.
func (p *provisioners) capacityRunner(client kubernetes.Interface, o options, log *zap.Logger) (runner, error) {
	cfg := storagecapacity.Config{Client: client, Driver: provisioner.LocalName, Node: o.nodeName, Namespace: o.capacityNS, Room: p.local.Room, Logger: log}
	if o.csiEndpoint != "" {
		return storagecapacity.NewWithdrawal(cfg)
	}
	pub, err := storagecapacity.New(cfg)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.room = pub
	p.mu.Unlock()
	return pub, nil
}

// warnings lists what the user must act on that restarting the agent
// would not fix, for /healthz: the CSIDriver object's problem.
func (p *provisioners) warnings() []string {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	check := p.driverCheck
	p.mu.Unlock()
	if check == nil || check.Problem() == "" {
		return nil
	}
	return []string{check.Problem()}
}

// config adds what every cluster controller shares to cfg.
func (p *provisioners) config(cfg provisioner.Config) provisioner.Config {
	cfg.PauseAfterStorage, cfg.ReclaimDelay, cfg.InUse = p.pause, p.delay, p.inUse
	return cfg
}

// tracked returns a runner of c that is told of changes of the actual
// state while it runs.
func (p *provisioners) tracked(c *provisioner.Controller) runner {
	return trackedController{p: p, c: c}
}

type trackedController struct {
	p *provisioners
	c *provisioner.Controller
}

func (t trackedController) Run(ctx context.Context) error {
	t.p.mu.Lock()
	t.p.live[t.c] = true
	t.p.mu.Unlock()
	defer func() {
		t.p.mu.Lock()
		delete(t.p.live, t.c)
		t.p.mu.Unlock()
	}()
	return t.c.Run(ctx)
}

// roomChanged tells the storage capacity publisher, if any, that the
// local provisioner's room may have changed. It never blocks.
func (p *provisioners) roomChanged() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.room != nil {
		p.room.Changed()
	}
}

// notifyActual tells the running controllers that the actual state
// changed. It never blocks.
func (p *provisioners) notifyActual() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.live {
		c.NotifyActual()
	}
}

// pending lists, for /v1/claims, the released PVs the running cluster
// controllers are to delete, sorted by claim.
func (p *provisioners) pending() []binder.ClaimStatus {
	p.mu.Lock()
	var out []binder.ClaimStatus
	for c := range p.live {
		for _, pv := range c.Pending() {
			out = append(out, binder.ClaimStatus{Namespace: pv.Namespace, Name: pv.Name, Phase: binder.PhaseReleased, PV: pv.PV,
				ReclaimPolicy: string(v1.PersistentVolumeReclaimDelete), PendingDeletion: binder.PendingDeletionOf(pv.State)})
		}
	}
	p.mu.Unlock()
	slices.SortFunc(out, func(a, b binder.ClaimStatus) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name), cmp.Compare(a.PV, b.PV))
	})
	return out
}

// closeWait bounds taking the export mounts down when leadership ends.
const closeWait = 5 * time.Second

// leadingNFS runs the nfs-subdir controller while this agent holds the
// Lease. Its export mounts are taken down when a term ends (another agent
// serves the claims then) and once before the first election, for what a
// crashed run left.
type leadingNFS struct {
	p      *provisioners
	client kubernetes.Interface
	log    *zap.Logger
}

func (l leadingNFS) Run(ctx context.Context) error {
	l.close()
	e := provisioner.Election{Client: l.client, Namespace: l.p.leaseNS, Identity: l.p.identity, Logger: l.log}
	return provisioner.RunLeading(ctx, e, provisioner.NFSSubdirName, func(term context.Context) error {
		defer l.close()
		c, err := provisioner.New(l.p.config(provisioner.Config{Client: l.client, Provisioner: l.p.nfs, Logger: l.log}))
		if err != nil {
			return err
		}
		return l.p.tracked(c).Run(term)
	})
}

// close takes the export mounts down; a failure is logged: the next term
// reuses what is still mounted.
func (l leadingNFS) close() {
	ctx, cancel := context.WithTimeout(context.Background(), closeWait)
	defer cancel()
	if err := l.p.nfs.Close(ctx); err != nil {
		l.log.Info("nfs-subdir export mounts not all taken down", zap.Error(err))
	}
}

// resolveLocalPathRoot creates --local-path-root when it is missing (0700:
// the volumes are for root and the pods' own mounts only) and resolves its
// symlinks once, as the root dir's are: the local provisioner works below a
// path without symlinks, its PVs record it, and whether it is inside
// --root-dir is decided on resolved paths.
func resolveLocalPathRoot(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("--local-path-root: %w", err)
	}
	resolved, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return "", fmt.Errorf("--local-path-root: %w", err)
	}
	return filepath.Abs(resolved)
}
