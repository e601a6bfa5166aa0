package usage

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/dsw"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a tmpfs")
	}
}

func writeFile(t *testing.T, path string, size int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
}

// blocks is du's count of path's bytes: st_blocks*512 (lstat).
func blocks(t *testing.T, paths ...string) uint64 {
	t.Helper()
	var sum uint64
	for _, p := range paths {
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		sum += uint64(st.Blocks) * 512
	}
	return sum
}

func newWalker(ctx context.Context) *walker {
	return &walker{ctx: ctx, stat: unix.Statx, pace: &pacer{}}
}

func TestWalkCountsBytesAndInodes(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "big")
	writeFile(t, outside, 1<<20)
	writeFile(t, filepath.Join(dir, "a"), 100<<10)
	writeFile(t, filepath.Join(dir, "sub", "b"), 10<<10)
	if err := os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "sub", "a-link")); err != nil {
		t.Fatal(err)
	}
	// Symlinks are counted as themselves, never followed: neither to the
	// big file outside nor to a directory.
	if err := os.Symlink(outside, filepath.Join(dir, "to-big")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/", filepath.Join(dir, "sub", "to-root")); err != nil {
		t.Fatal(err)
	}
	r, err := newWalker(context.Background()).walk(dir)
	if err != nil {
		t.Fatal(err)
	}
	counted := []string{dir, filepath.Join(dir, "a"), filepath.Join(dir, "sub"), filepath.Join(dir, "sub", "b"),
		filepath.Join(dir, "to-big"), filepath.Join(dir, "sub", "to-root")}
	if want := blocks(t, counted...); r.bytes != want {
		t.Errorf("bytes = %d, want %d (the hard link once, symlinks not followed)", r.bytes, want)
	}
	if r.inodes != 6 {
		t.Errorf("inodes = %d, want 6 (root, a, sub, b, two symlinks; the hard link once)", r.inodes)
	}
	if r.bytes < 110<<10 || r.bytes > 1<<20 {
		t.Errorf("bytes = %d: not the 110 KiB written", r.bytes)
	}
	if r.fs.capacity == 0 {
		t.Error("no capacity from the directory's file system")
	}
}

func TestWalkStopsAtMountPoint(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a"), 10<<10)
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", mnt, "tmpfs", 0, "size=8m"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
	writeFile(t, filepath.Join(mnt, "inside", "big"), 4<<20)
	// A bind mount of the same file system: the same device number, and
	// another mount ID.
	bind := filepath.Join(dir, "bind")
	if err := os.Mkdir(bind, 0o755); err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	writeFile(t, filepath.Join(src, "big"), 2<<20)
	if err := unix.Mount(src, bind, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(bind, unix.MNT_DETACH) })
	r, err := newWalker(context.Background()).walk(dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := blocks(t, dir, filepath.Join(dir, "a")); r.bytes != want || r.inodes != 2 {
		t.Fatalf("walk gave %d bytes, %d inodes; want %d, 2 (nothing below the mount points)", r.bytes, r.inodes, want)
	}
}

// fakeClock is a clock that only sleeping advances.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }
func (c *fakeClock) sleep(_ context.Context, d time.Duration) error {
	c.t = c.t.Add(d)
	return nil
}

func TestWalkKeepsToBudget(t *testing.T) {
	dir := t.TempDir()
	for i := range 20 {
		for j := range 50 {
			writeFile(t, filepath.Join(dir, "d"+itoa(i), "f"+itoa(j)), 1)
		}
	}
	clk := &fakeClock{t: time.Unix(1000, 0)}
	w := newWalker(context.Background())
	w.pace = &pacer{rate: 500, start: clk.t, now: clk.now, sleep: clk.sleep}
	r, err := w.walk(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.inodes != 1+20+1000 {
		t.Fatalf("inodes = %d, want 1021", r.inodes)
	}
	// 1,020 entries at 500 a second: two seconds, to within the last
	// batch.
	if took := clk.t.Sub(time.Unix(1000, 0)); took < 2*time.Second-time.Second/2 || took > 2*time.Second+time.Second/2 {
		t.Fatalf("the walk took %v at 500 entries a second; want about 2s", took)
	}
}

func itoa(i int) string { return string(rune('a'+i/26)) + string(rune('a'+i%26)) }

func TestWalkIsAbandonedOnHungFileSystem(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "hang"), 1)
	release := make(chan struct{})
	hung := func(dirfd int, name string, flags, mask int, st *unix.Statx_t) error {
		if name == "hang" {
			<-release
		}
		return unix.Statx(dirfd, name, flags, mask, st)
	}
	u := New(Config{Period: time.Minute, StallTimeout: 50 * time.Millisecond, stat: hung})
	s := &slot{target: Target{Key: dsw0, Path: dir}}
	start := time.Now()
	_, _, err := measureOnce(u, s, Target{Path: dir})
	if err == nil || !errorsIs(err, errStalled) {
		t.Fatalf("walk of a hung file system: %v; want it abandoned", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("abandoning took %v", took)
	}
	// The stuck call holds the volume: it is not asked again until the
	// call returns.
	s.due = time.Time{}
	u.slots[dsw0] = s
	u.measure(context.Background(), s)
	if _, ok := u.Usage(dsw0); ok {
		t.Fatal("a volume whose last call still hangs was measured again")
	}
	close(release)
	<-s.busy
	u.measure(context.Background(), s)
	if _, ok := u.Usage(dsw0); !ok {
		t.Fatal("the volume was not measured once its file system answered")
	}
}

// TestPassKeepsToBudget: the walks of a pass keep to EntriesPerSecond
// together, and sleep only when ahead by walkSlack: 20 small trees of 10
// entries below their root at 500 a second take about 0.4 s in a few
// sleeps, where each
// tree alone would sleep none; one small tree at the default pace makes
// no sleep (no wake-up).
func TestPassKeepsToBudget(t *testing.T) {
	start := time.Unix(1000, 0)
	for _, tc := range []struct {
		trees, rate, maxSleeps int
		took                   time.Duration
	}{
		{trees: 20, rate: 500, took: 400 * time.Millisecond, maxSleeps: int(400*time.Millisecond/walkSlack) + 1},
		{trees: 1, rate: DefaultEntriesPerSecond, took: 0, maxSleeps: 0},
	} {
		clk := &fakeClock{t: start}
		var sleeps int
		u := New(Config{Period: time.Minute, EntriesPerSecond: tc.rate})
		u.cfg.now = clk.now
		u.cfg.sleep = func(ctx context.Context, d time.Duration) error { sleeps++; return clk.sleep(ctx, d) }
		var slots []*slot
		for i := range tc.trees {
			dir := t.TempDir()
			for j := range 10 {
				writeFile(t, filepath.Join(dir, itoa(j)), 1)
			}
			s := &slot{target: Target{Key: dsw.Key{PodUID: "p", Volume: itoa(i)}, Path: dir}}
			u.slots[s.target.Key] = s
			slots = append(slots, s)
		}
		u.measure(context.Background(), slots...)
		if len(u.Stats()) != tc.trees {
			t.Fatalf("%d trees measured, want %d", len(u.Stats()), tc.trees)
		}
		if took := clk.t.Sub(start); took < tc.took-walkSlack || took > tc.took || sleeps > tc.maxSleeps {
			t.Errorf("%d trees at %d entries a second: %v in %d sleeps; want about %v in at most %d", tc.trees, tc.rate, took, sleeps, tc.took, tc.maxSleeps)
		}
	}
}
