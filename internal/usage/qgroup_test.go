package usage

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseQgroup(t *testing.T) {
	const out = `Qgroupid    Referenced    Exclusive  Max referenced  Max exclusive   Path
--------    ----------    ---------  --------------  -------------   ----
0/257          5259264      5259264        50000000           none   a
0/258            16384        16384            none           none   b
`
	for _, tc := range []struct {
		id      uint64
		want    qgroup
		noQuota bool
		fails   bool
	}{
		{id: 257, want: qgroup{referenced: 5259264, limit: 50000000}},
		{id: 0, want: qgroup{referenced: 5259264, limit: 50000000}}, // the first level-0 row
		{id: 258, noQuota: true},
		{id: 259, fails: true},
	} {
		got, err := parseQgroup(out, tc.id)
		switch {
		case tc.noQuota && !errorsIs(err, errNoQuota), tc.fails && err == nil, !tc.noQuota && !tc.fails && (err != nil || got != tc.want):
			t.Errorf("parseQgroup(0/%d) = %+v, %v", tc.id, got, err)
		}
	}
	if _, err := parseQgroup("0/257 x 0 100 none", 257); err == nil {
		t.Error("a referenced column that is no number was read")
	}
}

func TestQgroupMeasurement(t *testing.T) {
	m := qgroup{referenced: 7, limit: 5}.measurement(fsSize{available: 100})
	if m.CapacityBytes != 5 || m.UsedBytes != 7 || m.AvailableBytes != 0 || m.Method != MethodQuota {
		t.Fatalf("over its limit: %+v; want capacity 5, used 7, available 0", m)
	}
	if m := (qgroup{referenced: 2, limit: 50}).measurement(fsSize{available: 10}); m.AvailableBytes != 10 {
		t.Fatalf("on a fuller file system: available %d; want the file system's 10", m.AvailableBytes)
	}
}

// loopBtrfs makes and mounts a loop-backed btrfs with quotas on in a
// temporary directory and returns its mount point.
func loopBtrfs(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to mount a loop-backed btrfs")
	}
	if _, err := exec.LookPath("mkfs.btrfs"); err != nil {
		t.Skip("needs mkfs.btrfs (btrfs-progs)")
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "img"), filepath.Join(dir, "mnt")
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", args, err, out)
		}
	}
	run("truncate", "-s", "300M", img)
	run("mkfs.btrfs", "-q", img)
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	run("mount", "-o", "loop", img, mnt)
	t.Cleanup(func() { _ = exec.Command("umount", mnt).Run() })
	run("btrfs", "quota", "enable", mnt)
	return mnt
}

func subvolume(t testing.TB, path string, limit string) {
	t.Helper()
	if out, err := exec.Command("btrfs", "subvolume", "create", path).CombinedOutput(); err != nil {
		t.Fatalf("btrfs subvolume create: %v: %s", err, out)
	}
	if limit == "" {
		return
	}
	if out, err := exec.Command("btrfs", "qgroup", "limit", limit, path).CombinedOutput(); err != nil {
		t.Fatalf("btrfs qgroup limit: %v: %s", err, out)
	}
}

// A subvolume with a qgroup limit is measured by its qgroup, directly and
// through a bind mount of it (a claim's volume as its pod sees it); one
// without a limit, or once quotas are off, is walked.
func TestQuota(t *testing.T) {
	mnt := loopBtrfs(t)
	limited, open := filepath.Join(mnt, "limited"), filepath.Join(mnt, "open")
	subvolume(t, limited, "50M")
	subvolume(t, open, "")
	writeFile(t, filepath.Join(limited, "f"), 5<<20)
	writeFile(t, filepath.Join(open, "f"), 1<<20)
	unix.Sync() // qgroups are counted when a transaction commits
	bind := filepath.Join(t.TempDir(), "bind")
	if err := os.Mkdir(bind, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(limited, bind, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(bind, unix.MNT_DETACH) })

	u := New(Config{Period: time.Minute})
	for _, path := range []string{limited, bind} {
		m, ok, err := u.measureTarget(context.Background(), &slot{}, path)
		if err != nil || !ok {
			t.Fatalf("measure %s: %v, %v", path, ok, err)
		}
		if m.Method != MethodQuota || m.CapacityBytes != 50<<20 || m.AvailableBytes != m.CapacityBytes-m.UsedBytes {
			t.Fatalf("measured %s: %+v; want quota, capacity 50 MiB, the rest available", path, m)
		}
		if d := float64(m.UsedBytes)/(5<<20) - 1; d < -0.05 || d > 0.05 {
			t.Fatalf("measured %s: %d bytes used; want 5 MiB within 5 %%", path, m.UsedBytes)
		}
	}
	if m, _, err := u.measureTarget(context.Background(), &slot{}, open); err != nil || m.Method != MethodWalk {
		t.Fatalf("subvolume without a limit: %+v, %v; want a walk", m, err)
	}
	if out, err := exec.Command("btrfs", "quota", "disable", mnt).CombinedOutput(); err != nil {
		t.Fatalf("btrfs quota disable: %v: %s", err, out)
	}
	if m, _, err := u.measureTarget(context.Background(), &slot{}, limited); err != nil || m.Method != MethodWalk || m.UsedBytes < 5<<20 {
		t.Fatalf("quotas off: %+v, %v; want a walk of 5 MiB", m, err)
	}
}

// A size limit that a qgroup enforces is not watched: a subvolume a
// little over it (its metadata counts) is not Exceeded.
func TestQuotaEnforcesSizeLimit(t *testing.T) {
	mnt := loopBtrfs(t)
	vol := filepath.Join(mnt, "vol")
	subvolume(t, vol, "2M")
	writeFile(t, filepath.Join(vol, "f"), 1<<20)
	unix.Sync()
	tg := &targets{}
	tg.set(Target{Key: dsw0, Path: vol, SizeLimit: 1 << 20})
	u := New(Config{Targets: tg, Period: time.Minute})
	u.sync(time.Now())
	for _, s := range u.slots {
		u.measure(context.Background(), s)
	}
	m, ok := u.Usage(dsw0)
	if !ok || m.Method != MethodQuota || m.UsedBytes <= 1<<20 || m.SizeLimitBytes != 0 || m.Exceeded() {
		t.Fatalf("measured %+v, %v; want quota, over 1 MiB used, no size limit watched", m, ok)
	}
}
