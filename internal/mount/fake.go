package mount

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// Fake is an in-memory Mounter for unit tests: it records mounts without
// touching the kernel. Targets must exist, as for a real mount.
type Fake struct {
	mu     sync.Mutex
	mounts map[string]Mount // guarded by mu; by target
	// MountErr, when set, is returned by every Mount call.
	MountErr error
	// Log lists the calls made, e.g. "mount tmpfs /x", "unmount /x".
	Log []string // guarded by mu
}

var _ Mounter = (*Fake)(nil)

// Mount records m on target.
func (f *Fake) Mount(ctx context.Context, m Mount, target string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.MountErr != nil {
		return f.MountErr
	}
	if _, err := os.Stat(target); err != nil {
		return err
	}
	if f.mounts == nil {
		f.mounts = map[string]Mount{}
	}
	f.mounts[filepath.Clean(target)] = m
	f.Log = append(f.Log, "mount "+m.Type+" "+target)
	return nil
}

// Unmount forgets the mount on target.
func (f *Fake) Unmount(ctx context.Context, target string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.mounts, filepath.Clean(target))
	f.Log = append(f.Log, "unmount "+target)
	return nil
}

// IsMountPoint reports whether a mount is recorded on path.
func (f *Fake) IsMountPoint(ctx context.Context, path string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := os.Lstat(path); err != nil {
		return false, err
	}
	_, ok := f.mounts[filepath.Clean(path)]
	return ok, nil
}

// MountsUnder lists recorded mounts at or below dir, deepest first.
func (f *Fake) MountsUnder(ctx context.Context, dir string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	dir = filepath.Clean(dir)
	var out []string
	for target := range f.mounts {
		if target == dir || strings.HasPrefix(target, dir+"/") {
			out = append(out, target)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out, nil
}

// Calls returns a copy of Log, safe to read while the Fake is in use.
func (f *Fake) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.Log...)
}

// Mounted returns the mount recorded on target.
func (f *Fake) Mounted(target string) (Mount, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.mounts[filepath.Clean(target)]
	return m, ok
}
