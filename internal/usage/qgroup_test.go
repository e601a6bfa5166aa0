package usage

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/btrfs"
	"github.com/volume-agent/volume-agent/internal/btrfs/btrfstest"
	"github.com/volume-agent/volume-agent/internal/dsw"
)

// TestLimitingQgroup: quotas off, no btrfs(8) or a qgroup without a
// limit mean the subvolume is walked; other failures are errors.
func TestLimitingQgroup(t *testing.T) {
	limited := btrfs.Qgroup{ID: 257, Referenced: 5, Limit: 50, Limited: true}
	for _, tc := range []struct {
		name    string
		q       btrfs.Qgroup
		err     error
		noQuota bool
		fails   bool
	}{
		{name: "limited", q: limited},
		{name: "no limit", q: btrfs.Qgroup{ID: 257, Referenced: 5}, noQuota: true},
		{name: "quotas off", err: &btrfs.Error{Cmd: "btrfs qgroup show", Stderr: "ERROR: can't list qgroups: quotas not enabled", Err: errors.New("exit status 1")}, noQuota: true},
		{name: "no btrfs(8)", err: &exec.Error{Name: "btrfs", Err: exec.ErrNotFound}, noQuota: true},
		{name: "deadline", err: &btrfs.Error{Cmd: "btrfs qgroup show", Err: context.DeadlineExceeded}, fails: true},
	} {
		got, err := limitingQgroup(tc.q, tc.err)
		switch {
		case tc.noQuota && !errors.Is(err, errNoQuota),
			tc.fails && (err == nil || errors.Is(err, errNoQuota)),
			!tc.noQuota && !tc.fails && (err != nil || got != tc.q):
			t.Errorf("%s: limitingQgroup = %+v, %v", tc.name, got, err)
		}
	}
}

func TestQgroupMeasurement(t *testing.T) {
	m := quotaMeasurement(btrfs.Qgroup{Referenced: 7, Limit: 5, Limited: true}, fsSize{available: 100})
	if m.CapacityBytes != 5 || m.UsedBytes != 7 || m.AvailableBytes != 0 || m.Method != MethodQuota {
		t.Fatalf("over its limit: %+v; want capacity 5, used 7, available 0", m)
	}
	if m := quotaMeasurement(btrfs.Qgroup{Referenced: 2, Limit: 50, Limited: true}, fsSize{available: 10}); m.AvailableBytes != 10 {
		t.Fatalf("on a fuller file system: available %d; want the file system's 10", m.AvailableBytes)
	}
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
	mnt := btrfstest.Mount(t, true)
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
		m, ok, err := measureOnce(u, &slot{}, Target{Path: path})
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
	if m, _, err := measureOnce(u, &slot{}, Target{Path: open}); err != nil || m.Method != MethodWalk {
		t.Fatalf("subvolume without a limit: %+v, %v; want a walk", m, err)
	}
	if out, err := exec.Command("btrfs", "quota", "disable", mnt).CombinedOutput(); err != nil {
		t.Fatalf("btrfs quota disable: %v: %s", err, out)
	}
	if m, _, err := measureOnce(u, &slot{}, Target{Path: limited}); err != nil || m.Method != MethodWalk || m.UsedBytes < 5<<20 {
		t.Fatalf("quotas off: %+v, %v; want a walk of 5 MiB", m, err)
	}
}

// A size limit that a qgroup enforces is not watched: a subvolume a
// little over it (its metadata counts) is not Exceeded.
func TestQuotaEnforcesSizeLimit(t *testing.T) {
	mnt := btrfstest.Mount(t, true)
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

// TestEnforcedMeasurement: a subvolume with a QuotaLimit is measured from
// what Enforce returns; quotas off, or Enforce failing, say why the limit
// is not enforced and walk the volume with its size limit watched;
// more nested subvolumes than Enforce limits say so, measured by the
// qgroup; a qgroup over its limit reports the size limit exceeded.
func TestEnforcedMeasurement(t *testing.T) {
	root := btrfstest.Mount(t, false)
	vol := filepath.Join(root, "vol")
	subvolume(t, vol, "")
	if err := btrfstest.WriteSynced(filepath.Join(vol, "f"), 3<<20); err != nil {
		t.Fatal(err)
	}
	quotasOff := &btrfs.Error{Cmd: "btrfs qgroup show", Stderr: "ERROR: can't list qgroups: quotas not enabled", Err: errors.New("exit status 1")}
	for _, tc := range []struct {
		name      string
		limits    btrfs.Limits
		err       error
		method    string
		why       string // a part of NotEnforced; "" for none
		sizeLimit int64  // the SizeLimitBytes recorded
		overLimit bool
	}{
		{name: "enforced", limits: btrfs.Limits{Qgroup: btrfs.Qgroup{Referenced: 1 << 20, Limit: 8 << 20, Limited: true}}, method: MethodQuota},
		{name: "over its limit", limits: btrfs.Limits{Qgroup: btrfs.Qgroup{Referenced: 9 << 20, Limit: 8 << 20, Limited: true}}, method: MethodQuota, sizeLimit: 7 << 20, overLimit: true},
		{name: "quotas off", err: quotasOff, method: MethodWalk, why: "quotas are off", sizeLimit: 7 << 20},
		{name: "btrfs(8) fails", err: &btrfs.Error{Cmd: "btrfs qgroup create", Err: context.DeadlineExceeded}, method: MethodWalk, why: "could not be made", sizeLimit: 7 << 20},
		{name: "too many nested", limits: btrfs.Limits{Qgroup: btrfs.Qgroup{Referenced: 1 << 20, Limit: 8 << 20, Limited: true}}, err: btrfs.ErrTooManyNested, method: MethodQuota, why: "not counted", sizeLimit: 7 << 20},
	} {
		var gotLimit int64
		u := New(Config{Period: time.Minute})
		u.cfg.enforce = func(_ context.Context, path string, limit int64) (btrfs.Limits, error) {
			gotLimit = limit
			return tc.limits, tc.err
		}
		s := &slot{}
		target := Target{Path: vol, SizeLimit: 7 << 20, QuotaLimit: 8 << 20}
		m, ok, err := measureOnce(u, s, target)
		if err != nil || !ok || gotLimit != 8<<20 {
			t.Fatalf("%s: %+v, %v, %v; enforce told %d", tc.name, m, ok, err, gotLimit)
		}
		crossed, stat := u.record(s, target, m, ok, err)
		if stat.Method != tc.method || (tc.why == "") != (stat.NotEnforced == "") || !strings.Contains(stat.NotEnforced, tc.why) ||
			stat.SizeLimitBytes != tc.sizeLimit || crossed != tc.overLimit {
			t.Errorf("%s: %+v, crossed %v; want method %s, not enforced %q, size limit %d", tc.name, stat.Measurement, crossed, tc.method, tc.why, tc.sizeLimit)
		}
		if tc.method == MethodWalk && stat.UsedBytes < 3<<20 {
			t.Errorf("%s: walked %d bytes; want the 3 MiB", tc.name, stat.UsedBytes)
		}
	}
}

// TestNestedFoundBetweenMeasurements: a subvolume made inside a volume
// whose limit the agent enforces makes the volume due at the next
// checkNested, not a Period later; its measurement limits it, and a
// write into it past the limit fails with EDQUOT. A volume with nothing
// new inside stays as it was scheduled.
func TestNestedFoundBetweenMeasurements(t *testing.T) {
	root := btrfstest.Mount(t, true)
	vol := filepath.Join(root, "vol")
	subvolume(t, vol, "")
	ts := &targets{}
	ts.set(Target{Key: dsw.Key{PodUID: "u", Volume: "v"}, Path: vol, QuotaLimit: 4 << 20})
	u := New(Config{Targets: ts, Period: time.Hour})
	ctx := t.Context()
	now := time.Now()
	u.sync(now)
	s := u.slots[dsw.Key{PodUID: "u", Volume: "v"}]
	u.measure(ctx, s)
	if m, ok := u.Usage(s.target.Key); !ok || m.Method != MethodQuota || m.NotEnforced != "" || s.nested == nil {
		t.Fatalf("first measurement: %+v, %v; nested %v", m, ok, s.nested)
	}
	due := s.due
	u.checkNested(ctx, now)
	if s.due != due {
		t.Errorf("nothing new inside: due moved from %v to %v", due, s.due)
	}
	nested := filepath.Join(vol, "nested")
	subvolume(t, nested, "")
	u.checkNested(ctx, now)
	if s.due != now {
		t.Fatalf("a nested subvolume made: due %v, want now", s.due)
	}
	u.measure(ctx, s)
	if len(s.nested) != 1 {
		t.Fatalf("after the measurement, nested %v; want the nested subvolume", s.nested)
	}
	if err := btrfstest.WriteSynced(filepath.Join(nested, "f"), 6<<20); !errors.Is(err, unix.EDQUOT) {
		t.Errorf("6 MiB into the nested subvolume of a 4 MiB volume: %v, want EDQUOT", err)
	}
}

// TestStatfsSharedInAPass: the subvolumes of one btrfs measured by their
// qgroups in one pass read its statfs once (what is free is the file
// system's); each is measured by its own qgroup.
func TestStatfsSharedInAPass(t *testing.T) {
	mnt := btrfstest.Mount(t, true)
	u := New(Config{Period: time.Minute})
	var statfsCalls atomic.Int32
	u.cfg.statfs = func(path string) (fsSize, error) {
		statfsCalls.Add(1)
		return statfs(path)
	}
	var slots []*slot
	for i := range 3 {
		dir := filepath.Join(mnt, itoa(i))
		subvolume(t, dir, "50M")
		writeFile(t, filepath.Join(dir, "f"), (i+1)<<20)
		s := &slot{target: Target{Key: dsw.Key{PodUID: "p", Volume: itoa(i)}, Path: dir}}
		u.slots[s.target.Key] = s
		slots = append(slots, s)
	}
	unix.Sync()
	u.measure(context.Background(), slots...)
	if n := statfsCalls.Load(); n != 1 {
		t.Fatalf("a pass over 3 subvolumes of one btrfs read its statfs %d times; want once", n)
	}
	for i, s := range slots {
		m, ok := u.Usage(s.target.Key)
		if want := float64(i+1) * (1 << 20); !ok || m.Method != MethodQuota || m.AvailableBytes == 0 ||
			float64(m.UsedBytes) < want*0.95 || float64(m.UsedBytes) > want*1.05 {
			t.Fatalf("subvolume %d: %+v, %v; want quota, %v bytes used within 5 %%", i, m, ok, want)
		}
	}
}
