package manifest

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/volume-agent/volume-agent/internal/source"
	"github.com/volume-agent/volume-agent/internal/source/volumesnapshot"
	"github.com/volume-agent/volume-agent/internal/volume"
)

// SourceName is the name of this source in logs, the status API and the
// records of its pods.
const SourceName = "manifests"

// sourceName is SourceName.
const sourceName = SourceName

// defaultResync is the period of the safety full rescan when Config.Resync is zero.
const defaultResync = time.Minute

// Config configures a manifest Source.
type Config struct {
	// Dir is the directory of manifests. Required; must exist and be a
	// directory. It is followed as a path: a directory replaced by another
	// one of the same name, or a symlink on the way to it swapped to another
	// target, is read anew at once (see follower).
	Dir string
	// NodeName is this node's name. Required.
	NodeName string
	// Logger is required; the source names it "manifests".
	Logger *zap.Logger
	// OnChange is called after the state (pods, objects, errors, synced)
	// changed. It is never called while a lock is held and may be called
	// spuriously. It runs on Run's goroutine, so it should only signal (for
	// example enqueue) and return. Optional.
	OnChange func()
	// Resync is the period of the full rescan that catches missed events,
	// jittered by ±10%. Default 1m.
	Resync time.Duration
}

// Source reads pods and the objects they refer to from a directory of
// manifests. Create it with New.
type Source struct {
	dir      string
	path     string // dir, absolute
	nodeName string
	resync   time.Duration
	debounce debounce
	onChange func()
	logger   *zap.Logger

	// scanner is owned by the goroutine in Run; nothing else touches it.
	scanner *scanner
	// running prevents two concurrent calls of Run from sharing the scanner.
	running atomic.Bool

	mu   sync.Mutex
	snap *snapshot // guarded by mu; replaced, never modified
}

var _ source.Source = (*Source)(nil)

// New validates cfg and returns a Source. It starts nothing and reads no
// manifest: Run does.
func New(cfg Config) (*Source, error) {
	if err := validateConfig(cfg); err != nil {
		return nil, err
	}
	resync := cfg.Resync
	if resync == 0 {
		resync = defaultResync
	}
	dir := filepath.Clean(cfg.Dir)
	path, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("manifest source: manifest directory: %w", err)
	}
	logger := cfg.Logger.Named(sourceName).With(zap.String("dir", dir))
	return &Source{
		dir:      dir,
		path:     path,
		nodeName: cfg.NodeName,
		resync:   resync,
		debounce: debounce{delay: debounceDelay, max: debounceMax},
		onChange: cfg.OnChange,
		logger:   logger,
		scanner:  newScanner(dir, cfg.NodeName, logger),
		snap:     initialSnapshot(),
	}, nil
}

func validateConfig(cfg Config) error {
	switch {
	case cfg.Dir == "":
		return errors.New("manifest source: Dir is required")
	case cfg.NodeName == "":
		return errors.New("manifest source: NodeName is required")
	case cfg.Logger == nil:
		return errors.New("manifest source: Logger is required")
	case cfg.Resync < 0:
		return fmt.Errorf("manifest source: Resync %v is negative", cfg.Resync)
	}
	info, err := os.Stat(cfg.Dir)
	if err != nil {
		return fmt.Errorf("manifest source: manifest directory: %w", err)
	}
	if !info.IsDir() {
		return fmt.Errorf("manifest source: manifest directory %q is not a directory", cfg.Dir)
	}
	return nil
}

// Name returns "manifests".
func (s *Source) Name() string { return sourceName }

// Pods returns the pods bound to this node (spec.nodeName empty or equal to
// NodeName), sorted by namespace and name. The pods are shared, read-only
// snapshots; the slice is the caller's.
func (s *Source) Pods() []*v1.Pod {
	return slices.Clone(s.current().pods)
}

// Objects resolves ConfigMaps and Secrets against the current state at each call.
func (s *Source) Objects() volume.Objects { return objects{s: s} }

// Node returns the Node object named NodeName, or nil.
func (s *Source) Node() *v1.Node {
	node, err := lookup[*v1.Node](s, key{kind: kindNode, name: s.nodeName})
	if err != nil {
		return nil
	}
	return node
}

// PersistentVolume returns the named PersistentVolume; the error wraps
// volume.ErrNotFound when there is none.
func (s *Source) PersistentVolume(name string) (*v1.PersistentVolume, error) {
	return lookup[*v1.PersistentVolume](s, key{kind: kindPV, name: name})
}

// PersistentVolumeClaim returns the named claim; the error wraps
// volume.ErrNotFound when there is none.
func (s *Source) PersistentVolumeClaim(namespace, name string) (*v1.PersistentVolumeClaim, error) {
	return lookup[*v1.PersistentVolumeClaim](s, key{kind: kindPVC, namespace: namespace, name: name})
}

// PersistentVolumes returns every PersistentVolume the manifests define,
// sorted by name. The objects are shared, read-only snapshots; the slice is
// the caller's. Until the source is synced the list may be incomplete.
func (s *Source) PersistentVolumes() []*v1.PersistentVolume {
	return list[*v1.PersistentVolume](s.current(), kindPV)
}

// PersistentVolumeClaims returns every PersistentVolumeClaim the manifests
// define, sorted by namespace and name. The objects are shared, read-only
// snapshots; the slice is the caller's. Until the source is synced the list
// may be incomplete.
func (s *Source) PersistentVolumeClaims() []*v1.PersistentVolumeClaim {
	return list[*v1.PersistentVolumeClaim](s.current(), kindPVC)
}

// StorageClasses returns every StorageClass the manifests define, sorted by
// name. The objects are shared, read-only snapshots; the slice is the
// caller's. Until the source is synced the list may be incomplete: a class
// missing then is not known yet, not absent.
func (s *Source) StorageClasses() []*storagev1.StorageClass {
	return list[*storagev1.StorageClass](s.current(), kindStorageClass)
}

// Status reports whether the source is synced and what is wrong with it now.
func (s *Source) Status() source.Status {
	st := s.current().status
	st.Errors = slices.Clone(st.Errors)
	return st
}

func (s *Source) current() *snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snap
}

// publish makes next the current snapshot and calls OnChange, outside the
// lock, when it differs from the previous one.
func (s *Source) publish(next *snapshot) {
	s.mu.Lock()
	next.status.ListingSince = listingSince(s.snap, next, time.Now())
	changed := !s.snap.equal(next)
	if changed {
		s.snap = next
	}
	s.mu.Unlock()
	if changed && s.onChange != nil {
		s.onChange()
	}
}

// listingSince is the ListingSince of next, published after prev at now:
// kept while the synced source goes on listing objects, now when it begins
// to, zero while it lists none or is not synced.
func listingSince(prev, next *snapshot, now time.Time) time.Time {
	switch {
	case !next.status.Synced || len(next.objects) == 0:
		return time.Time{}
	case !prev.status.ListingSince.IsZero():
		return prev.status.ListingSince
	}
	return now
}

// lookup returns the object under k in the current snapshot. An object
// that is not there is absent only once the source is synced: before, a
// file that has not parsed since start may define it, and "not known yet"
// must make a volume wait, never empty it.
func lookup[T runtime.Object](s *Source, k key) (T, error) {
	snap := s.current()
	obj, ok := snap.objects[k]
	if !ok {
		var zero T
		if !snap.status.Synced {
			why := snap.status.Reason
			if len(snap.status.Errors) > 0 { // which file, and why it does not parse
				why += ": " + strings.Join(snap.status.Errors, "; ")
			}
			return zero, fmt.Errorf("%s: %w (%s)", k, volume.ErrNotReady, why)
		}
		return zero, fmt.Errorf("%s: %w", k, volume.ErrNotFound)
	}
	return obj.(T), nil
}

// list returns the objects of one kind in snap, sorted by namespace and name.
func list[T runtime.Object](snap *snapshot, kind string) []T {
	var keys []key
	for k := range snap.objects {
		if k.kind == kind {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(a, b key) int {
		return cmp.Or(cmp.Compare(a.namespace, b.namespace), cmp.Compare(a.name, b.name))
	})
	objs := make([]T, len(keys))
	for i, k := range keys {
		objs[i] = snap.objects[k].(T)
	}
	return objs
}

// objects implements volume.Objects on the source's current snapshot.
type objects struct{ s *Source }

func (o objects) ConfigMap(namespace, name string) (*v1.ConfigMap, error) {
	return lookup[*v1.ConfigMap](o.s, key{kind: kindConfigMap, namespace: namespace, name: name})
}

func (o objects) Secret(namespace, name string) (*v1.Secret, error) {
	return lookup[*v1.Secret](o.s, key{kind: kindSecret, namespace: namespace, name: name})
}

func (o objects) PersistentVolumeClaim(namespace, name string) (*v1.PersistentVolumeClaim, error) {
	return o.s.PersistentVolumeClaim(namespace, name)
}

func (o objects) PersistentVolume(name string) (*v1.PersistentVolume, error) {
	return o.s.PersistentVolume(name)
}

// VolumeSnapshots returns every VolumeSnapshot the manifests define,
// sorted by namespace and name. The objects are shared, read-only
// snapshots; the slice is the caller's. Until the source is synced the
// list may be incomplete.
func (s *Source) VolumeSnapshots() []*volumesnapshot.VolumeSnapshot {
	return list[*volumesnapshot.VolumeSnapshot](s.current(), kindVolumeSnapshot)
}

// VolumeSnapshotClasses returns every VolumeSnapshotClass the manifests
// define, sorted by name, as VolumeSnapshots does.
func (s *Source) VolumeSnapshotClasses() []*volumesnapshot.VolumeSnapshotClass {
	return list[*volumesnapshot.VolumeSnapshotClass](s.current(), kindVolumeSnapshotClass)
}
