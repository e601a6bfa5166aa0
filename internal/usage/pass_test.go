package usage

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/dsw"
)

// TestDueOnAGrid: new volumes are due at most at gridSteps points of one
// grid within a period; those due together are measured in one pass by
// one worker, and each is then due at a point epoch+k*Period, a period or
// more later (all volumes together from their second measurement): the
// next pass measures them all, and is due again a period later.
func TestDueOnAGrid(t *testing.T) {
	tg := &targets{}
	var list []Target
	for i := range 60 {
		list = append(list, Target{Key: dsw.Key{PodUID: "p", Volume: itoa(i)}, Path: t.TempDir()})
	}
	tg.set(list...)
	u := New(Config{Targets: tg, Period: time.Minute, EntriesPerSecond: -1})
	now := time.Now()
	u.sync(now)
	points := map[time.Time]int{}
	var first time.Time
	for _, s := range u.slots {
		if !u.floor(s.due).Equal(s.due) {
			t.Fatalf("due at %v: not on the grid", s.due)
		}
		points[s.due]++
		if first.IsZero() || s.due.Before(first) {
			first = s.due
		}
	}
	if len(points) > gridSteps {
		t.Fatalf("due at %d points of time; want at most %d", len(points), gridSteps)
	}
	due := u.due(first)
	if len(due) != points[first] {
		t.Fatalf("%d due at the first point, want %d", len(due), points[first])
	}
	workers := u.workers.Load()
	u.measure(context.Background(), due...)
	if n := u.workers.Load() - workers; n != 1 {
		t.Fatalf("one pass of %d volumes started %d workers; want 1", len(due), n)
	}
	next := u.nextPeriod(first.Add(time.Minute))
	if d := next.Sub(first); d < time.Minute || d >= 2*time.Minute || next.Sub(u.epoch)%time.Minute != 0 {
		t.Fatalf("next point %v after %v: want a multiple of the period from the epoch, one to two periods later", next, first)
	}
	for _, s := range due {
		if !s.have || !s.due.Equal(next) {
			t.Fatalf("volume %s: measured %v, due again at %v; want measured, due at %v", s.target.Volume, s.have, s.due, next)
		}
	}
	// Measured in turn at their first points, all are due at that one
	// point; measured there, all are due a period later.
	for _, p := range slices.SortedFunc(maps.Keys(points), time.Time.Compare) {
		u.measure(context.Background(), u.due(p)...)
	}
	all := u.due(next)
	if len(all) != len(list) {
		t.Fatalf("%d due together at %v; want all %d", len(all), next, len(list))
	}
	for _, s := range all {
		if !s.due.Equal(next.Add(time.Minute)) {
			t.Fatalf("volume %s due at %v after the common point; want %v", s.target.Volume, s.due, next.Add(time.Minute))
		}
	}
}

// TestHungVolumeInAPass: a volume whose file system hangs in the middle
// of a pass is abandoned at its bound and reported as not measured; the
// volumes after it in the pass are measured by a new worker; at the next
// pass it alone is skipped (not asked again while its call hangs), and
// once its call returns it is measured again.
func TestHungVolumeInAPass(t *testing.T) {
	dirs := []string{t.TempDir(), t.TempDir(), t.TempDir()}
	writeFile(t, filepath.Join(dirs[1], "hang"), 1)
	release := make(chan struct{})
	var asked atomic.Int32
	hung := func(dirfd int, name string, flags, mask int, st *unix.Statx_t) error {
		if name == "hang" {
			asked.Add(1)
			<-release
		}
		return unix.Statx(dirfd, name, flags, mask, st)
	}
	u := New(Config{Period: time.Minute, StallTimeout: 50 * time.Millisecond, stat: hung})
	var slots []*slot
	for i, dir := range dirs {
		s := &slot{target: Target{Key: dsw.Key{PodUID: "p", Volume: itoa(i)}, Path: dir}}
		u.slots[s.target.Key] = s
		slots = append(slots, s)
	}
	u.measure(context.Background(), slots...)
	if !slots[0].have || !slots[2].have {
		t.Fatal("a volume before or after the hung one was not measured in the pass")
	}
	if slots[1].have || !slots[1].warned {
		t.Fatal("the hung volume was measured, or its failure not logged")
	}
	if n := u.workers.Load(); n != 2 {
		t.Fatalf("%d workers; want 2 (the hung one replaced)", n)
	}
	slots[0].have, slots[2].have = false, false
	u.measure(context.Background(), slots...)
	if !slots[0].have || !slots[2].have || asked.Load() != 1 {
		t.Fatalf("second pass: measured %v %v, the hung file system asked %d times; want both measured, asked once", slots[0].have, slots[2].have, asked.Load())
	}
	close(release)
	<-slots[1].busy
	u.measure(context.Background(), slots[1])
	if !slots[1].have {
		t.Fatal("the volume was not measured once its file system answered")
	}
}

// TestHungCallIsBounded: a probe, a statfs or a search for nested
// subvolumes that does not return is given up after CallTimeout; the
// pass goes on with the next volume.
func TestHungCallIsBounded(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	u := New(Config{Period: time.Minute, CallTimeout: 20 * time.Millisecond})
	u.cfg.nested = func(path string) (uint64, []uint64, error) {
		if strings.HasSuffix(path, "hung") {
			<-release
		}
		return 256, []uint64{300}, nil
	}
	hung := &slot{target: Target{Key: dsw.Key{PodUID: "p", Volume: "a"}, Path: "/hung", QuotaLimit: 1}}
	fine := &slot{target: Target{Key: dsw.Key{PodUID: "p", Volume: "b"}, Path: "/fine", QuotaLimit: 1}}
	u.slots[hung.target.Key], u.slots[fine.target.Key] = hung, fine
	now := time.Now()
	u.checkNested(context.Background(), now)
	if !fine.due.Equal(now) || hung.due.Equal(now) {
		t.Fatalf("after a hung search: fine due %v, hung due %v; want the fine one due now", fine.due, hung.due)
	}
	u.mu.Lock()
	defer u.mu.Unlock()
	if idle(hung) {
		t.Fatal("the volume whose search hangs is not busy")
	}
}

// TestProbedOnce: a volume is probed once while it stays as it is: a
// volume that is its own mount is then measured by statfs alone, a
// plain directory after one statx. When a mount comes or goes on the
// volume's directory, it is probed again and measured as it is now.
func TestProbedOnce(t *testing.T) {
	needRoot(t)
	own, plain := filepath.Join(t.TempDir(), "own"), filepath.Join(t.TempDir(), "plain")
	mountTmpfs(t, own, "size=4m")
	writeFile(t, filepath.Join(plain, "f"), 64<<10)
	u := New(Config{Period: time.Minute})
	so := &slot{target: Target{Key: dsw.Key{PodUID: "p", Volume: "own"}, Path: own}}
	sp := &slot{target: Target{Key: dsw.Key{PodUID: "p", Volume: "plain"}, Path: plain}}
	u.slots[so.target.Key], u.slots[sp.target.Key] = so, sp
	for range 3 {
		u.measure(context.Background(), so, sp)
	}
	// A tmpfs gives a file system ID from Linux 6.8 (its UUID); before,
	// its directory is checked as a plain one's is.
	checks := int64(2)
	var st unix.Statfs_t
	if err := unix.Statfs(own, &st); err != nil {
		t.Fatal(err)
	} else if st.Fsid.Val == [2]int32{} {
		checks = 4
	}
	if n, c := u.mounts.probes.Load(), u.dirChecks.Load(); n != 2 || c != checks {
		t.Fatalf("3 passes over a tmpfs and a directory: %d probes, %d statx checks; want 2 (one each), %d", n, c, checks)
	}
	if m, _ := u.Usage(so.target.Key); m.Method != MethodStatfs || m.CapacityBytes != 4<<20 {
		t.Fatalf("the tmpfs measured %+v", m)
	}
	// The tmpfs goes: its directory is a plain one on the parent's file
	// system, walked; a tmpfs comes on the plain directory: statfs.
	if err := unix.Unmount(own, 0); err != nil {
		t.Fatal(err)
	}
	mountTmpfs(t, plain, "size=8m")
	u.measure(context.Background(), so, sp)
	if m, _ := u.Usage(so.target.Key); m.Method != MethodWalk {
		t.Errorf("the tmpfs unmounted: measured %+v; want a walk", m)
	}
	if m, _ := u.Usage(sp.target.Key); m.Method != MethodStatfs || m.CapacityBytes != 8<<20 {
		t.Errorf("a tmpfs mounted on the directory: measured %+v; want statfs of the 8 MiB tmpfs", m)
	}
	if n := u.mounts.probes.Load(); n != 4 {
		t.Errorf("%d probes; want 4 (both again)", n)
	}
}

// TestProbeFailureForgets: a volume whose measurement fails is probed
// again at its next one.
func TestProbeFailureForgets(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "v")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	u := New(Config{Period: time.Minute})
	s := &slot{target: Target{Key: dsw0, Path: dir}}
	u.slots[dsw0] = s
	u.measure(context.Background(), s)
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	u.measure(context.Background(), s)
	if s.probe != nil {
		t.Fatal("the probe of a volume gone was kept")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	u.measure(context.Background(), s)
	if n := u.mounts.probes.Load(); n != 2 {
		t.Fatalf("%d probes; want 2", n)
	}
}
