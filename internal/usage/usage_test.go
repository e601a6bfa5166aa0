package usage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/dsw"
)

var dsw0 = dsw.Key{PodUID: "pod", Volume: "v"}

func errorsIs(err, target error) bool { return errors.Is(err, target) }

func mountTmpfs(t *testing.T, dir, opts string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, opts); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
}

func TestStatfsOfTmpfs(t *testing.T) {
	needRoot(t)
	vol := filepath.Join(t.TempDir(), "vol")
	mountTmpfs(t, vol, "size=8m")
	writeFile(t, filepath.Join(vol, "f"), 1<<20)
	u := New(Config{Period: time.Minute})
	m, ok, err := measureOnce(u, &slot{}, Target{Path: vol})
	if err != nil || !ok {
		t.Fatalf("measure: %v, %v", ok, err)
	}
	if m.Method != MethodStatfs || m.CapacityBytes != 8<<20 {
		t.Fatalf("measured %+v; want statfs, capacity 8 MiB", m)
	}
	if m.UsedBytes != 1<<20 || m.AvailableBytes != 7<<20 || m.InodesUsed < 2 || m.Inodes == 0 {
		t.Fatalf("measured %+v; want 1 MiB used, 7 MiB available, the inodes", m)
	}
}

func TestProbe(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.Mkdir(plain, 0o755); err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(dir, "own")
	mountTmpfs(t, own, "size=1m")
	// A bind mount of a subdirectory: a mount point whose root is not its
	// file system's, walked.
	sub := filepath.Join(t.TempDir(), "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	bind := filepath.Join(dir, "bind")
	if err := os.Mkdir(bind, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(sub, bind, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(bind, unix.MNT_DETACH) })
	table := &mountTable{maxAge: time.Minute, now: time.Now}
	for path, want := range map[string]how{plain: byWalk, own: byStatfs, bind: byWalk} {
		if got, err := table.probe(path); err != nil || got.how != want {
			t.Errorf("probe(%s) = %v, %v; want %v", path, got, err, want)
		}
	}
	if _, err := table.probe(filepath.Join(dir, "missing")); err == nil {
		t.Error("probe of a missing directory did not fail")
	}
}

func TestNetworkTypes(t *testing.T) {
	for fsType, want := range map[string]bool{"nfs": true, "nfs4": true, "fuse.sshfs": true, "ext4": false, "tmpfs": false, "btrfs": false} {
		if network(fsType) != want {
			t.Errorf("network(%q) = %v", fsType, !want)
		}
	}
}

// targets is a Targets the test sets.
type targets struct {
	mu   sync.Mutex
	list []Target
}

func (t *targets) UsageTargets() []Target {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Target(nil), t.list...)
}

func (t *targets) set(list ...Target) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.list = list
}

func TestRunMeasuresEveryVolume(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(a, "f"), 64<<10)
	tg := &targets{}
	ka, kb := dsw.Key{PodUID: "p", Volume: "a"}, dsw.Key{PodUID: "p", Volume: "b"}
	tg.set(Target{Key: ka, Path: a}, Target{Key: kb, Path: b})
	u := New(Config{Targets: tg, Period: 100 * time.Millisecond})
	changes := u.Watch()
	changes.Take()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- u.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitFor(t, func() bool { _, okA := u.Usage(ka); _, okB := u.Usage(kb); return okA && okB })
	m, _ := u.Usage(ka)
	if m.Method != MethodWalk || m.UsedBytes < 64<<10 || m.InodesUsed != 2 || m.Time.IsZero() {
		t.Fatalf("measured %+v; want a walk of 64 KiB and 2 inodes", m)
	}
	if pods, all := changes.Take(); !all && len(pods) == 0 {
		t.Fatal("a measurement named no pod as changed")
	}
	// New content shows within a period or two.
	writeFile(t, filepath.Join(a, "g"), 256<<10)
	waitFor(t, func() bool { m, _ := u.Usage(ka); return m.UsedBytes >= 320<<10 })
	// A volume gone is forgotten.
	tg.set(Target{Key: ka, Path: a})
	u.Notify()
	waitFor(t, func() bool { return len(u.Stats()) == 1 })
}

func TestWalksOff(t *testing.T) {
	u := New(Config{Period: 0})
	_, ok, err := measureOnce(u, &slot{}, Target{Path: t.TempDir()})
	if ok || err != nil {
		t.Fatalf("with walks off a plain directory was measured: %v, %v", ok, err)
	}
}

// The first measurements are spread over a period, not all at start.
func TestFirstMeasurementsSpread(t *testing.T) {
	tg := &targets{}
	var list []Target
	for i := range 100 {
		list = append(list, Target{Key: dsw.Key{PodUID: "p", Volume: itoa(i)}})
	}
	tg.set(list...)
	u := New(Config{Targets: tg, Period: time.Minute})
	now := time.Now()
	u.sync(now)
	var early, late int
	for _, s := range u.slots {
		switch d := s.due.Sub(now); {
		case d < 0 || d >= time.Minute:
			t.Fatalf("first measurement due in %v; want within the period", d)
		case d < 30*time.Second:
			early++
		default:
			late++
		}
	}
	if early < 20 || late < 20 {
		t.Fatalf("%d due in the first half of the period, %d in the second: not spread", early, late)
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A volume whose file system hangs holds the others up for StallTimeout
// once, then not at all: it is not asked again while its call hangs.
func TestRunGoesOnPastAHungVolume(t *testing.T) {
	hungDir, fine := t.TempDir(), t.TempDir()
	writeFile(t, filepath.Join(hungDir, "hang"), 1)
	release := make(chan struct{})
	var asked atomic.Int32
	hung := func(dirfd int, name string, flags, mask int, st *unix.Statx_t) error {
		if name == "hang" {
			asked.Add(1)
			<-release
		}
		return unix.Statx(dirfd, name, flags, mask, st)
	}
	tg := &targets{}
	kh, kf := dsw.Key{PodUID: "p", Volume: "hung"}, dsw.Key{PodUID: "p", Volume: "fine"}
	tg.set(Target{Key: kh, Path: hungDir}, Target{Key: kf, Path: fine})
	u := New(Config{Targets: tg, Period: 50 * time.Millisecond, StallTimeout: 100 * time.Millisecond, stat: hung})
	changes := u.Watch()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- u.Run(ctx) }()
	defer func() {
		cancel()
		<-done
		close(release)
		u.mu.Lock()
		busy := u.slots[kh].busy
		u.mu.Unlock()
		<-busy // the hung walk has returned
	}()
	// The fine volume is measured again and again: ten times at least.
	measured := 0
	waitFor(t, func() bool {
		if pods, _ := changes.Take(); len(pods) > 0 {
			measured++
		}
		return measured >= 10
	})
	if _, ok := u.Usage(kh); ok {
		t.Fatal("the hung volume was measured")
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("the hung file system was asked %d times; want once (not again while the call hangs)", n)
	}
}

// A statfs that does not return (a dead NFS server) is given up on after
// CallTimeout, and not asked again while it hangs.
func TestStatfsIsBounded(t *testing.T) {
	needRoot(t)
	vol := filepath.Join(t.TempDir(), "vol")
	mountTmpfs(t, vol, "size=1m")
	release := make(chan struct{})
	var asked atomic.Int32
	u := New(Config{Period: time.Minute, CallTimeout: 50 * time.Millisecond})
	u.cfg.statfs = func(string) (fsSize, error) {
		asked.Add(1)
		<-release
		return fsSize{}, nil
	}
	s := &slot{target: Target{Key: dsw0, Path: vol}}
	u.slots[dsw0] = s
	start := time.Now()
	u.measure(context.Background(), s)
	if took := time.Since(start); took > time.Second {
		t.Fatalf("a hung statfs held the measurer %v", took)
	}
	u.measure(context.Background(), s)
	if n := asked.Load(); n != 1 {
		t.Fatalf("statfs asked %d times while hung; want once", n)
	}
	if _, ok := u.Usage(dsw0); ok || !s.warned {
		t.Fatal("a hung statfs gave a measurement, or was not logged")
	}
	close(release)
	<-s.busy
}

// A volume torn down since the targets were read is not a failure.
func TestVolumeGoneIsNoFailure(t *testing.T) {
	u := New(Config{Period: time.Minute})
	s := &slot{target: Target{Key: dsw0, Path: filepath.Join(t.TempDir(), "gone")}}
	u.slots[dsw0] = s
	u.measure(context.Background(), s)
	if s.warned {
		t.Fatal("a volume gone was logged as a failure")
	}
}

// Network storage is never walked: its own mount is measured by statfs,
// and a directory inside it not at all.
func TestProbeNeverWalksNetworkStorage(t *testing.T) {
	needRoot(t)
	plain := t.TempDir()
	export := filepath.Join(t.TempDir(), "export")
	mountTmpfs(t, export, "size=1m")
	sub := filepath.Join(export, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	table := &mountTable{maxAge: time.Hour, now: time.Now}
	if _, err := table.probe(plain); err != nil { // reads the table
		t.Fatal(err)
	}
	// Make both mounts look like NFS in the cached table.
	for _, dir := range []string{plain, export} {
		var st unix.Statx_t
		if err := unix.Statx(unix.AT_FDCWD, dir, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_MNT_ID, &st); err != nil {
			t.Fatal(err)
		}
		table.byID[st.Mnt_id] = mountInfo{root: "/export/" + filepath.Base(dir), fsType: "nfs4"}
	}
	for path, want := range map[string]how{plain: notAtAll, sub: notAtAll, export: byStatfs} {
		if got, err := table.probe(path); err != nil || got.how != want {
			t.Errorf("probe(%s) on NFS = %v, %v; want %v", path, got, err, want)
		}
	}
}
