package binder

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/reclaim"
)

// opTimeout bounds one Provision or Delete call: storage that hangs blocks
// only its own PersistentVolume.
const opTimeout = 2 * time.Minute

// The backoff of a failed call doubles from retryMin up to a cap that
// depends on how it failed (backoffCap).
const (
	// fixRetryMax caps the backoff of a call that failed by itself. Its
	// cause is one the operator fixes outside the agent's sight (quotas
	// off, no room, a tool missing, a class parameter) or a passing one,
	// and the provisioners look at every cause again on each call, so a
	// fix is taken up within these seconds; such a retry costs a few
	// cheap checks (a statfs, a btrfs qgroup show), one call at a time per
	// PersistentVolume.
	fixRetryMax = 5 * time.Second
	// hungRetryMax caps the backoff of a call that ran into its deadline:
	// storage that hangs may keep a stuck tool (or thread) of each try
	// for up to opTimeout, so such calls are made at most once a minute.
	hungRetryMax = time.Minute
)

// operations runs the provisioners' calls that plan asks for: at most one
// per PersistentVolume name, each on its own goroutine under a deadline, a
// failed one again after a backoff (doubling from retryMin up to
// backoffCap).
// It keeps their results until a pass has recorded them. Only the binding
// loop uses it, so it needs no lock.
type operations struct {
	provisioners map[string]provisioner.Provisioner
	snapshotters map[string]Snapshotter
	// pause is Config.PauseAfterStorage.
	pause    time.Duration
	retryMin time.Duration
	timeout  time.Duration
	log      *zap.Logger
	// done receives the result of every call.
	done chan opResult
	wg   sync.WaitGroup
	st   opsState
	// backoff is, by PV name, the wait before a failed call is made again.
	backoff map[string]backoff
	timer   *time.Timer
}

type backoff struct {
	delay time.Duration
	due   time.Time
}

// opResult is the outcome of one call.
type opResult struct {
	pv   string
	what string // "provision", or a reclaim.Action
	// made is the PersistentVolume of a successful Provision.
	made *v1.PersistentVolume
	// size is the size of a successful expansion.
	size string
	// snap is what a successful snapshot call reports.
	snap SnapshotInfo
	err  error
}

func newOperations(provs []provisioner.Provisioner, snaps map[string]Snapshotter, pause time.Duration, log *zap.Logger) *operations {
	byName := make(map[string]provisioner.Provisioner, len(provs))
	for _, p := range provs {
		byName[p.Name()] = p
	}
	return &operations{
		provisioners: byName,
		snapshotters: snaps,
		pause:        pause,
		retryMin:     retryMin,
		timeout:      opTimeout,
		log:          log,
		done:         make(chan opResult),
		st: opsState{running: map[string]bool{}, made: map[string]*v1.PersistentVolume{}, asided: map[string]bool{},
			restored: map[string]bool{}, deleted: map[string]bool{}, failed: map[string]string{}, expanded: map[string]string{},
			taken: map[string]SnapshotInfo{}, snapDeleted: map[string]bool{}},
		backoff: map[string]backoff{},
	}
}

// names returns the names of the provisioners, for plan.
func (ops *operations) names() map[string]bool {
	names := make(map[string]bool, len(ops.provisioners))
	for name := range ops.provisioners {
		names[name] = true
	}
	return names
}

// snapshotterNames returns the names of the provisioners that take
// snapshots, for plan.
func (ops *operations) snapshotterNames() map[string]bool {
	names := make(map[string]bool, len(ops.snapshotters))
	for name := range ops.snapshotters {
		names[name] = true
	}
	return names
}

// expanders returns the names of the provisioners that can expand volumes.
func (ops *operations) expanders() map[string]bool {
	names := map[string]bool{}
	for name, p := range ops.provisioners {
		if _, ok := p.(provisioner.Expander); ok {
			names[name] = true
		}
	}
	return names
}

// recorded forgets the results recs now hold: provisioned PersistentVolumes
// recorded, restored ones Bound again, deleted ones whose record is
// dropped, and storage put aside whose record is no longer in step Aside.
// It is called once recs are on disk.
func (ops *operations) recorded(recs records, snaps snapRecords) {
	for handle := range ops.st.taken {
		if r, ok := snaps[handle]; !ok || r.Step != snapTaking {
			delete(ops.st.taken, handle)
		}
	}
	for handle := range ops.st.snapDeleted {
		if _, ok := snaps[handle]; !ok {
			delete(ops.st.snapDeleted, handle)
		}
	}
	for name := range ops.st.made {
		if recs.provisioned(name) != nil {
			delete(ops.st.made, name)
		}
	}
	for name := range ops.st.restored {
		if r, ok := recs[name]; !ok || r.Phase == PhaseBound {
			delete(ops.st.restored, name)
		}
	}
	for name := range ops.st.asided {
		if r, ok := recs[name]; !ok || r.Reclaim.Step != reclaim.Aside {
			delete(ops.st.asided, name)
		}
	}
	for name := range ops.st.deleted {
		if _, ok := recs[name]; !ok {
			delete(ops.st.deleted, name)
		}
	}
	for name, size := range ops.st.expanded {
		if recs[name].ExpandTo != size {
			delete(ops.st.expanded, name)
		}
	}
}

// start starts the operations of o that are neither running nor backing
// off, forgets the failures of PersistentVolumes that o no longer wants
// anything done to, and arms the timer for the next retry.
func (ops *operations) start(ctx context.Context, o outcome) {
	wanted := map[string]bool{}
	for _, p := range o.provisions {
		wanted[p.req.PVName] = true
		prov := ops.provisioners[p.provisioner]
		ops.launch(ctx, p.req.PVName, "provision", "", func(ctx context.Context) (*v1.PersistentVolume, error) {
			req, err := withContent(p.req, p.content)
			if err != nil {
				return nil, fmt.Errorf("provision PersistentVolume %q for claim %s/%s: %w", p.req.PVName, p.req.Claim.Namespace, p.req.Claim.Name, err)
			}
			vol, err := prov.Provision(ctx, req)
			if err != nil {
				return nil, fmt.Errorf("provision PersistentVolume %q for claim %s/%s with %s: %w",
					p.req.PVName, p.req.Claim.Namespace, p.req.Claim.Name, p.provisioner, err)
			}
			ops.pauseAfterStorage(ctx)
			return provisioner.NewPV(p.req, prov.Name(), vol), nil
		})
	}
	for _, op := range o.storage {
		wanted[op.pv.Name] = true
		call := storageCall(ops.provisioners[op.provisioner], op.action)
		ops.launch(ctx, op.pv.Name, string(op.action), "", func(ctx context.Context) (*v1.PersistentVolume, error) {
			if err := call(ctx, op.pv); err != nil {
				return nil, fmt.Errorf("%s the storage of PersistentVolume %q with %s: %w", op.action, op.pv.Name, op.provisioner, err)
			}
			return nil, nil
		})
	}
	for _, op := range o.expansions {
		wanted[op.pv.Name] = true
		ops.launchExpand(ctx, op)
	}
	for _, op := range o.snapOps {
		wanted[op.r.Handle] = true
		ops.launchSnapshot(ctx, op)
	}
	for name := range ops.st.failed {
		if !wanted[name] && !ops.st.running[name] {
			delete(ops.st.failed, name)
			delete(ops.backoff, name)
		}
	}
	ops.arm(wanted)
}

// launchExpand grows the storage of op.pv with its provisioner.
func (ops *operations) launchExpand(ctx context.Context, op expandOp) {
	size := op.size.String()
	ops.launch(ctx, op.pv.Name, "expand", size, func(ctx context.Context) (*v1.PersistentVolume, error) {
		e, ok := ops.provisioners[op.provisioner].(provisioner.Expander)
		if !ok {
			return nil, fmt.Errorf("expand the storage of PersistentVolume %q: provisioner %q cannot expand volumes", op.pv.Name, op.provisioner)
		}
		if err := e.Expand(ctx, op.pv, op.size.Value()); err != nil {
			return nil, fmt.Errorf("expand the storage of PersistentVolume %q to %s with %s: %w", op.pv.Name, size, op.provisioner, err)
		}
		return nil, nil
	})
}

// storageCall is the provisioner's method for action.
func storageCall(p provisioner.Provisioner, action reclaim.Action) func(context.Context, *v1.PersistentVolume) error {
	switch action {
	case reclaim.MoveAside:
		return p.MoveAside
	case reclaim.Restore:
		return p.Restore
	}
	return p.Delete
}

// launch runs call for PV name on a goroutine (size: the size of an
// expansion, for its result), unless one is running or
// its backoff has not expired.
func (ops *operations) launch(ctx context.Context, name, what, size string, call func(context.Context) (*v1.PersistentVolume, error)) {
	ops.launchCall(ctx, name, func(ctx context.Context) opResult {
		made, err := call(ctx)
		return opResult{pv: name, what: what, made: made, size: size, err: err}
	})
}

// launchCall runs call for name (a PV name, or a snapshot's handle) on a
// goroutine under the deadline, unless one is running or its backoff has
// not expired.
func (ops *operations) launchCall(ctx context.Context, name string, call func(context.Context) opResult) {
	if ops.st.running[name] || time.Now().Before(ops.backoff[name].due) {
		return
	}
	ops.st.running[name] = true
	ops.wg.Add(1)
	go func() {
		defer ops.wg.Done()
		callCtx, cancel := context.WithTimeout(ctx, ops.timeout)
		res := call(callCtx)
		cancel()
		select {
		case ops.done <- res:
		case <-ctx.Done():
		}
	}()
}

// finish takes in the result of a call.
func (ops *operations) finish(res opResult) {
	delete(ops.st.running, res.pv)
	if res.err != nil {
		ops.failedCall(res)
		return
	}
	delete(ops.st.failed, res.pv)
	delete(ops.backoff, res.pv)
	switch res.what {
	case "provision":
		ops.st.made[res.pv] = res.made
	case "expand":
		ops.st.expanded[res.pv] = res.size
	case opSnapshot:
		ops.st.taken[res.pv] = res.snap
	case opDeleteSnapshot:
		ops.st.snapDeleted[res.pv] = true
	case string(reclaim.MoveAside):
		ops.st.asided[res.pv] = true
		delete(ops.st.restored, res.pv)
	case string(reclaim.Restore):
		ops.st.restored[res.pv] = true
		delete(ops.st.asided, res.pv)
	default:
		ops.st.deleted[res.pv] = true
	}
}

// failedCall backs off a failed call. A failure is logged as a warning
// when it is new (or says something new), else at debug level: the same
// cause retried every few seconds is one line, not one a retry.
func (ops *operations) failedCall(res opResult) {
	b := ops.backoff[res.pv]
	b.delay = min(max(2*b.delay, ops.retryMin), backoffCap(res.err))
	b.due = time.Now().Add(b.delay)
	ops.backoff[res.pv] = b
	fields := []zap.Field{zap.String("operation", res.what), zap.String("pv", res.pv),
		zap.Duration("retryIn", b.delay), zap.Bool("deadline", errors.Is(res.err, context.DeadlineExceeded)), zap.Error(res.err)}
	if ops.st.failed[res.pv] == res.err.Error() {
		ops.log.Debug("storage operation failed", fields...)
		return
	}
	ops.st.failed[res.pv] = res.err.Error()
	ops.log.Warn("storage operation failed", fields...)
}

// backoffCap is the longest wait before a call that failed with err is
// made again: hungRetryMax after its deadline, else fixRetryMax. Either
// way it is at most a minute, so a claim waits at most that long after
// the operator fixed what its reason names.
func backoffCap(err error) time.Duration {
	if errors.Is(err, context.DeadlineExceeded) {
		return hungRetryMax
	}
	return fixRetryMax
}

// arm sets the timer to the earliest backoff expiry among the wanted calls
// that are not running.
func (ops *operations) arm(wanted map[string]bool) {
	var next time.Time
	for name := range wanted {
		b, ok := ops.backoff[name]
		if ok && !ops.st.running[name] && (next.IsZero() || b.due.Before(next)) {
			next = b.due
		}
	}
	if ops.timer != nil {
		ops.timer.Stop()
	}
	if next.IsZero() {
		ops.timer = nil
		return
	}
	ops.timer = time.NewTimer(max(time.Until(next), 0))
}

// retry fires when a failed call may be made again; never when none is waiting.
func (ops *operations) retry() <-chan time.Time {
	if ops.timer == nil {
		return nil
	}
	return ops.timer.C
}

// stop waits for the running calls, whose context has ended, and stops the timer.
func (ops *operations) stop() {
	ops.wg.Wait()
	if ops.timer != nil {
		ops.timer.Stop()
	}
}

// pauseAfterStorage waits Config.PauseAfterStorage, or until ctx ends.
func (ops *operations) pauseAfterStorage(ctx context.Context) {
	if ops.pause <= 0 {
		return
	}
	t := time.NewTimer(ops.pause)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
