package capacity

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// The environment of TestCrashHelper, the process the crash test kills.
const (
	envCrashAt = "CAPACITY_TEST_CRASH_AT" // the crash point to die at (1, 2, …)
	envRoot    = "CAPACITY_TEST_ROOT"
	envRound   = "CAPACITY_TEST_ROUND"
	envExpand  = "CAPACITY_TEST_EXPAND" // "true": expand the volume "keep"
	envNested  = "CAPACITY_TEST_NESTED" // "true": make a subvolume inside "a"
)

// TestCrashAnywhere kills a process running Create, Expand, Delete,
// Archive, Snapshot, CreateFrom of the snapshot, CreateFrom of a volume
// and DeleteSnapshot with SIGKILL at every crash point in turn (before
// and after each tool, each record write, each copy and each freeze and
// thaw of an image volume), then recovers as a restarted agent would,
// and checks: Recover succeeds; no loop device, image, subvolume, qgroup,
// directory, snapshot or record remains that is not a recovered volume,
// archive or snapshot; each recovered image has one loop device, is
// mounted and is not frozen (a crash while frozen is thawed: some crash
// point must have left one frozen); the volume made before the crashes
// keeps its data, and a restore or clone that was recovered holds it.
func TestCrashAnywhere(t *testing.T) {
	t.Run("btrfs", func(t *testing.T) { crashAnywhere(t, btrfsRoot(t, true), true, true) })
	t.Run("image", func(t *testing.T) { root := imageRoot(t); crashAnywhere(t, root, capSysResource(t), false) })
}

func crashAnywhere(t *testing.T, root string, expand, nested bool) {
	b, _ := open(t, Config{Root: root})
	dir, err := b.Create(t.Context(), "keep", 8*mi)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data"), []byte("kept"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Delete(t.Context(), "keep") })
	thawed := 0
	for at := 1; ; at++ {
		if at > 800 {
			t.Fatal("the helper never finished")
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.count=1")
		cmd.Env = append(os.Environ(), envCrashAt+"="+strconv.Itoa(at), envRoot+"="+root,
			envRound+"="+strconv.Itoa(at), envExpand+"="+strconv.FormatBool(expand), envNested+"="+strconv.FormatBool(nested))
		out, err := cmd.CombinedOutput()
		killed := false
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			ws, ok := exit.Sys().(syscall.WaitStatus)
			killed = ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
		}
		if err != nil && !killed {
			t.Fatalf("crash point %d: helper: %v\n%s", at, err, out)
		}
		r, logs := open(t, Config{Root: root})
		vols, err := r.Recover(t.Context())
		thawed += logs.FilterMessage("image volume found frozen (a snapshot was cut short): thawed").Len()
		if err != nil {
			t.Fatalf("crash point %d: recover: %v", at, err)
		}
		archives := archivesIn(t, root)
		checkConsistent(t, at, root, vols, archives)
		image, _ := lexists(filepath.Join(root, "keep"+ImageSuffix))
		snaps := checkSnapshots(t, at, r, root, vols, image)
		for _, s := range snaps {
			if err := r.(Snapshotter).DeleteSnapshot(t.Context(), s); err != nil {
				t.Fatalf("crash point %d: delete snapshot %s: %v", at, s, err)
			}
		}
		for _, v := range vols {
			if v.Name != "keep" {
				if err := r.Delete(t.Context(), v.Name); err != nil {
					t.Fatalf("crash point %d: delete %s: %v", at, v.Name, err)
				}
			}
		}
		for _, a := range archives {
			if err := r.Delete(t.Context(), a); err != nil {
				t.Fatalf("crash point %d: delete archive %s: %v", at, a, err)
			}
		}
		if !killed {
			t.Logf("%d crash points, each recovered; %d volumes found frozen and thawed", at-1, thawed)
			if image, _ := lexists(filepath.Join(root, "keep"+ImageSuffix)); image && thawed == 0 {
				t.Error("no crash point left an image volume frozen: the freeze is not among the crash points")
			}
			return
		}
	}
}

// TestCrashHelper is the process TestCrashAnywhere kills; alone, it skips.
func TestCrashHelper(t *testing.T) {
	at, err := strconv.Atoi(os.Getenv(envCrashAt))
	if err != nil {
		t.Skip("the helper of TestCrashAnywhere")
	}
	round, _ := strconv.Atoi(os.Getenv(envRound))
	b, err := Open(t.Context(), Config{Root: os.Getenv(envRoot), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	stepHook = func() {
		if n++; n == at {
			_ = unix.Kill(os.Getpid(), unix.SIGKILL)
			select {} // the signal is on its way
		}
	}
	dir, err := b.Create(t.Context(), "a", 8*mi)
	if err != nil {
		t.Fatal(err)
	}
	if os.Getenv(envNested) == "true" {
		sh(t, "btrfs", "subvolume", "create", filepath.Join(dir, "nested"))
	}
	if os.Getenv(envExpand) == "true" {
		if err := b.Expand(t.Context(), "keep", int64(8+round)*mi); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Delete(t.Context(), "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(t.Context(), "b", 4*mi); err != nil {
		t.Fatal(err)
	}
	dir, err = b.Create(t.Context(), "c", 4*mi)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data"), []byte("archived"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := b.(Archiver).Archive(t.Context(), "c"); err != nil {
		t.Fatal(err)
	}
	// Snapshot, restore, clone and delete the snapshot, of "keep",
	// whose data the parent checks in each.
	s := b.(Snapshotter)
	snap, err := s.Snapshot(t.Context(), "keep", "s1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateFrom(t.Context(), "r", snap.Size, Source{Snapshot: "s1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateFrom(t.Context(), "cl", snap.Size+mi, Source{Volume: "keep"}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteSnapshot(t.Context(), "s1"); err != nil {
		t.Fatal(err)
	}
}

// checkSnapshots checks the snapshots after Recover: at most s1, ready,
// listed by Snapshots, its copy under .snapshots and nothing else there;
// a volume made from it or cloned from keep holds keep's data; an image
// volume is not left frozen. It returns the snapshots.
func checkSnapshots(t *testing.T, at int, b Backend, root string, vols []Volume, image bool) []string {
	t.Helper()
	list, err := b.(Snapshotter).Snapshots(t.Context())
	if err != nil {
		t.Fatalf("crash point %d: snapshots: %v", at, err)
	}
	var names []string
	for _, s := range list {
		names = append(names, s.Name)
	}
	if len(names) > 1 || len(names) == 1 && names[0] != "s1" {
		t.Fatalf("crash point %d: snapshots %v, want at most s1", at, names)
	}
	des, err := os.ReadDir(filepath.Join(root, ".capacity", "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	var records []string
	for _, de := range des {
		records = append(records, strings.TrimSuffix(de.Name(), recordSuffix))
	}
	des, err = os.ReadDir(filepath.Join(root, ".snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	var copies []string
	for _, de := range des {
		copies = append(copies, strings.TrimSuffix(de.Name(), ImageSuffix))
	}
	if !slices.Equal(records, names) || !slices.Equal(copies, names) {
		t.Fatalf("crash point %d: snapshots %v; records %v, copies %v", at, names, records, copies)
	}
	for _, v := range vols {
		if v.Name == "r" || v.Name == "cl" {
			if got, err := os.ReadFile(filepath.Join(v.Path, "data")); err != nil || string(got) != "kept" {
				t.Fatalf("crash point %d: %s holds %q, %v; want keep's data", at, v.Name, got, err)
			}
		}
		if image {
			if thawed, err := thawLeft(v.Path); err != nil || thawed {
				t.Fatalf("crash point %d: volume %s left frozen after Recover (%t, %v)", at, v.Name, thawed, err)
			}
		}
	}
	return names
}

// archivesIn lists the archives whose records are under root.
func archivesIn(t *testing.T, root string) []string {
	t.Helper()
	j := journal{dir: filepath.Join(root, ".capacity")}
	names, err := j.names()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if r, err := j.load(n); err == nil && r.State == archived {
			out = append(out, n)
		}
	}
	return out
}

// checkConsistent checks that what is under root is exactly vols and
// archives: at most one archive, of c, and never c with it; a btrfs
// archive holds c's data.
func checkConsistent(t *testing.T, at int, root string, vols []Volume, archives []string) {
	t.Helper()
	var names []string
	for _, v := range vols {
		names = append(names, v.Name)
	}
	slices.Sort(names)
	switch {
	case len(archives) > 1 || len(archives) == 1 && archives[0] != "archived-c":
		t.Fatalf("crash point %d: archives %v, want at most archived-c", at, archives)
	case len(archives) == 1 && slices.Contains(names, "c"):
		t.Fatalf("crash point %d: c both recovered and archived", at)
	}
	all := slices.Sorted(slices.Values(append(slices.Clone(names), archives...)))
	if !slices.Contains(names, "keep") {
		t.Fatalf("crash point %d: keep was not recovered (%v)", at, names)
	}
	if got, err := os.ReadFile(filepath.Join(root, "keep", "data")); err != nil || string(got) != "kept" {
		t.Fatalf("crash point %d: keep's data: %q, %v", at, got, err)
	}
	var dirs, images, records []string
	des, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		switch n := de.Name(); {
		case n == ".capacity", n == ".snapshots":
		case strings.HasSuffix(n, ImageSuffix):
			images = append(images, strings.TrimSuffix(n, ImageSuffix))
		default:
			dirs = append(dirs, n)
		}
	}
	des, err = os.ReadDir(filepath.Join(root, ".capacity"))
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if de.Name() != "snapshots" {
			records = append(records, strings.TrimSuffix(de.Name(), recordSuffix))
		}
	}
	if !slices.Equal(records, all) {
		t.Fatalf("crash point %d: recovered %v and archives %v; records %v", at, names, archives, records)
	}
	if len(images) > 0 {
		if !slices.Equal(images, all) || !slices.Equal(dirs, names) {
			t.Fatalf("crash point %d: recovered %v and archives %v; images %v, directories %v", at, names, archives, images, dirs)
		}
		checkLoops(t, at, root, names) // none for an archive
		return
	}
	if !slices.Equal(dirs, all) {
		t.Fatalf("crash point %d: recovered %v and archives %v; directories %v", at, names, archives, dirs)
	}
	for _, a := range archives {
		if got, err := os.ReadFile(filepath.Join(root, a, "data")); err != nil || string(got) != "archived" {
			t.Fatalf("crash point %d: archive %s holds %q, %v", at, a, got, err)
		}
	}
	checkQgroups(t, at, root, all)
}

// checkLoops wants one loop device, mounted, per image, and none other
// backed by a file under root.
func checkLoops(t *testing.T, at int, root string, names []string) {
	t.Helper()
	out := sh(t, "losetup", "--list", "--noheadings", "--output", "BACK-FILE")
	var backing []string
	for _, f := range strings.Split(out, "\n") {
		if f = strings.TrimSpace(f); strings.HasPrefix(f, root+"/") {
			backing = append(backing, strings.TrimSuffix(strings.TrimPrefix(f, root+"/"), ImageSuffix))
		}
	}
	slices.Sort(backing)
	if !slices.Equal(backing, names) {
		t.Fatalf("crash point %d: loop devices backed by %v, want one each for %v", at, backing, names)
	}
	for _, n := range names {
		dev := loopsOf(t, filepath.Join(root, n+ImageSuffix))[0]
		if err := sameDevice(filepath.Join(root, n), dev); err != nil {
			t.Fatalf("crash point %d: %s: %v", at, n, err)
		}
	}
}

// checkQgroups wants a subvolume per volume (and those made inside
// them), none elsewhere, and a qgroup per subvolume and none other.
func checkQgroups(t *testing.T, at int, root string, names []string) {
	t.Helper()
	want := []string{"0/5"}
	var tops, snaps []string
	for _, line := range strings.Split(sh(t, "btrfs", "subvolume", "list", root), "\n") {
		f := strings.Fields(line) // ID 257 gen 9 top level 5 path vol
		if len(f) < 9 || f[0] != "ID" {
			continue
		}
		want = append(want, "0/"+f[1])
		top, rest, _ := strings.Cut(f[8], "/")
		switch {
		case top == ".snapshots":
			snaps = append(snaps, rest)
		case !slices.Contains(tops, top):
			tops = append(tops, top)
		}
	}
	if want := snapshotsRecorded(t, root); !slices.Equal(snaps, want) {
		t.Fatalf("crash point %d: snapshot subvolumes %v, want %v", at, snaps, want)
	}
	slices.Sort(tops)
	if !slices.Equal(tops, names) {
		t.Fatalf("crash point %d: subvolumes under %v, want %v", at, tops, names)
	}
	var got []string
	for _, line := range strings.Split(sh(t, "btrfs", "qgroup", "show", "--raw", root), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "0/") {
			got = append(got, f[0])
		}
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("crash point %d: qgroups %v, want %v", at, got, want)
	}
}

// snapshotsRecorded lists the snapshots that have records under root.
func snapshotsRecorded(t *testing.T, root string) []string {
	t.Helper()
	names, err := journal{dir: filepath.Join(root, ".capacity", "snapshots")}.names()
	if err != nil {
		t.Fatal(err)
	}
	return names
}
