package capacity

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/btrfs"
)

// TestBtrfsLimitUsageExpandDelete: a 10 MiB volume refuses the 11th MiB
// with EDQUOT, reports what was written, takes more once expanded (the
// same open file, no remount), and leaves no subvolume or qgroup behind.
func TestBtrfsLimitUsageExpandDelete(t *testing.T) {
	root := btrfsRoot(t, true)
	b, _ := open(t, Config{Root: root})
	dir, err := b.Create(t.Context(), "vol", 10*mi)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := b.Create(t.Context(), "vol", 10*mi); err != nil || again != dir {
		t.Fatalf("create again: %q, %v; want %q", again, err, dir)
	}
	if _, err := b.Create(t.Context(), "vol", 20*mi); !errors.Is(err, ErrExists) {
		t.Fatalf("create with another size: %v, want ErrExists", err)
	}
	f := create(t, filepath.Join(dir, "data"))
	if _, err := fill(f, 5); err != nil {
		t.Fatal(err)
	}
	checkUsage(t, b, "vol", 5*mi, 10*mi)
	// 5 MiB of 10 are written: the volume may take 5 MiB more.
	if p := promised(t, b)["vol"]; p < 4*mi+mi/2 || p > 5*mi+mi/2 {
		t.Errorf("Promised of a 10 MiB volume holding 5 MiB: %d bytes, want about 5 MiB", p)
	}

	n, err := fill(f, 6)
	if !isErrno(err, unix.EDQUOT) {
		t.Fatalf("writing 11 MiB into 10 MiB: %d bytes more, error %v; want EDQUOT", n, err)
	}
	if total := 5*mi + n; total > 10*mi || total < 9*mi {
		t.Errorf("%d bytes written before EDQUOT, want 9-10 MiB", total)
	}

	if err := b.Expand(t.Context(), "vol", 20*mi); err != nil {
		t.Fatal(err)
	}
	if err := b.Expand(t.Context(), "vol", 10*mi); !errors.Is(err, ErrShrink) {
		t.Fatalf("shrink: %v, want ErrShrink", err)
	}
	g := create(t, filepath.Join(dir, "more"))
	if _, err := fill(g, 5); err != nil {
		t.Fatalf("5 MiB more after expanding to 20 MiB: %v", err)
	}

	id := subvolumeID(t, dir)
	f.Close()
	g.Close() // the kernel drops a deleted subvolume once nothing in it is open
	if err := b.Delete(t.Context(), "vol"); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(t.Context(), "vol"); err != nil {
		t.Fatalf("delete again: %v", err)
	}
	checkGone(t, root, "vol", id)
}

// promised is b.Promised.
func promised(t *testing.T, b Backend) map[string]int64 {
	t.Helper()
	p, err := b.Promised(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkUsage syncs the file system (qgroups are counted at commit) and
// wants Usage to report used bytes within 5 % of want.
func checkUsage(t *testing.T, b Backend, name string, want, capacity int64) {
	t.Helper()
	unix.Sync()
	u, err := b.Usage(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	if u.UsedBytes < want*95/100 || u.UsedBytes > want*105/100 {
		t.Errorf("used %d bytes, want %d ± 5 %%", u.UsedBytes, want)
	}
	if u.CapacityBytes != capacity || u.AvailableBytes != capacity-u.UsedBytes {
		t.Errorf("usage %+v, want capacity %d and the rest available", u, capacity)
	}
}

func subvolumeID(t *testing.T, dir string) uint64 {
	t.Helper()
	id, err := strconv.ParseUint(strings.TrimSpace(sh(t, "btrfs", "inspect-internal", "rootid", dir)), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// checkGone wants no directory, no subvolume, no qgroup 0/id and no record.
func checkGone(t *testing.T, root, name string, id uint64) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(root, name)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s remains: %v", name, err)
	}
	if list := sh(t, "btrfs", "subvolume", "list", root); strings.Contains(list, " path "+name+"\n") {
		t.Errorf("subvolume %s remains:\n%s", name, list)
	}
	if hasQgroup(t, root, id) {
		t.Errorf("qgroup 0/%d remains", id)
	}
	if _, err := os.Stat(filepath.Join(root, ".capacity", name+".json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("record of %s remains: %v", name, err)
	}
}

func hasQgroup(t *testing.T, root string, id uint64) bool {
	t.Helper()
	ok, err := btrfs.Tool{}.HasQgroup(t.Context(), root, id)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestBtrfsQuotaOff: a root without quotas is opened, with a warning; a
// volume is refused with the command that fixes it, leaving nothing
// behind, until the operator runs that command: then the same backend,
// with no restart, makes it. Open turns quotas on when the config lets it.
func TestBtrfsQuotaOff(t *testing.T) {
	root := btrfsRoot(t, false)
	b, logs := open(t, Config{Root: root})
	if logs.FilterMessage("capacity not enforced on the local path root").Len() != 1 {
		t.Error("no warning at open that quotas are off")
	}
	want := "btrfs quotas are off on the local path root " + root + ": turn them on (btrfs quota enable " + root + ")"
	for range 2 {
		if _, err := b.Create(t.Context(), "vol", 4*mi); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("create without quotas: %v; want it saying %q", err, want)
		}
	}
	if ok, err := lexists(filepath.Join(root, "vol")); err != nil || ok {
		t.Errorf("a refused creation left its subvolume (%t, %v)", ok, err)
	}
	sh(t, "btrfs", "quota", "enable", root)
	if _, err := b.Create(t.Context(), "vol", 4*mi); err != nil {
		t.Fatalf("create once quotas are on, same backend: %v", err)
	}
	if err := b.Expand(t.Context(), "vol", 8*mi); err != nil {
		t.Fatal(err)
	}
	sh(t, "btrfs", "quota", "disable", root)
	if err := b.Expand(t.Context(), "vol", 12*mi); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("expand without quotas: %v; want it saying %q", err, want)
	}

	root = btrfsRoot(t, false)
	b, logs = open(t, Config{Root: root, EnableBtrfsQuota: true})
	if logs.FilterMessage("turned on btrfs quotas on the local path root").Len() != 1 {
		t.Error("no log line for turning quotas on")
	}
	if _, err := b.Create(t.Context(), "vol", 4*mi); err != nil {
		t.Fatal(err)
	}
}

// TestBtrfsRecover: after a crash in the middle of a creation or of a
// deletion, Recover removes the volume with its qgroup; a ready volume
// is returned with its limit set again; an expansion is finished.
func TestBtrfsRecover(t *testing.T) {
	root := btrfsRoot(t, true)
	b, _ := open(t, Config{Root: root})
	j := journal{dir: filepath.Join(root, ".capacity")}
	ids := map[string]uint64{}
	for _, name := range []string{"creating", "deleting", "ready", "expanding", "bare"} {
		dir, err := b.Create(t.Context(), name, 8*mi)
		if err != nil {
			t.Fatal(err)
		}
		ids[name] = subvolumeID(t, dir)
	}
	// Crashes: a creation whose ID was never written down, a deletion
	// whose subvolume is gone but not its qgroup, an expansion recorded
	// but not applied, a subvolume made before its ID was saved.
	crash := func(name string, s state, size int64, id uint64) {
		if err := j.save(&record{Name: name, Backend: "btrfs", State: s, Size: size, ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	crash("creating", creating, 8*mi, 0)
	crash("deleting", deleting, 8*mi, ids["deleting"])
	sh(t, "btrfs", "subvolume", "delete", filepath.Join(root, "deleting"))
	crash("expanding", expanding, 16*mi, ids["expanding"])
	crash("bare", creating, 8*mi, 0)

	b2, _ := open(t, Config{Root: root})
	vols, err := b2.Recover(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"ready": 8 * mi, "expanding": 16 * mi}
	if len(vols) != len(want) {
		t.Fatalf("recovered %+v, want %v", vols, want)
	}
	for _, v := range vols {
		if want[v.Name] != v.Size || v.Path != filepath.Join(root, v.Name) {
			t.Errorf("recovered %+v, want size %d", v, want[v.Name])
		}
	}
	for _, name := range []string{"creating", "deleting", "bare"} {
		checkGone(t, root, name, ids[name])
	}
	f := create(t, filepath.Join(root, "expanding", "data"))
	if _, err := fill(f, 12); err != nil {
		t.Errorf("12 MiB into the volume expanded to 16 MiB by Recover: %v", err)
	}
}

// TestBtrfsLeavesForeignAlone: a directory or subvolume under the root
// that has no record is never taken over nor removed.
func TestBtrfsLeavesForeignAlone(t *testing.T) {
	root := btrfsRoot(t, true)
	b, _ := open(t, Config{Root: root})
	sh(t, "btrfs", "subvolume", "create", filepath.Join(root, "theirs"))
	if err := os.Mkdir(filepath.Join(root, "plain"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"theirs", "plain"} {
		if _, err := b.Create(t.Context(), name, 4*mi); err == nil {
			t.Errorf("create over %s: no error", name)
		}
		if err := b.Delete(t.Context(), name); err != nil {
			t.Errorf("delete %s (no record): %v", name, err)
		}
		if _, err := os.Stat(filepath.Join(root, name)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if out, err := exec.Command("btrfs", "subvolume", "show", filepath.Join(root, "theirs")).CombinedOutput(); err != nil {
		t.Errorf("subvolume theirs: %v: %s", err, out)
	}
}

// TestBtrfsNestedSubvolumes: subvolumes a user made inside a volume (any
// user may) do not stop its deletion, and leave no qgroup.
func TestBtrfsNestedSubvolumes(t *testing.T) {
	root := btrfsRoot(t, true)
	b, _ := open(t, Config{Root: root})
	dir, err := b.Create(t.Context(), "vol", 8*mi)
	if err != nil {
		t.Fatal(err)
	}
	id := subvolumeID(t, dir)
	var nested []uint64
	for _, p := range []string{"a", "a/deeper", "b"} {
		sh(t, "btrfs", "subvolume", "create", filepath.Join(dir, p))
		nested = append(nested, subvolumeID(t, filepath.Join(dir, p)))
	}
	if err := os.Symlink(root, filepath.Join(dir, "up")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Create(t.Context(), "other", 8*mi); err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(t.Context(), "vol"); err != nil {
		t.Fatal(err)
	}
	checkGone(t, root, "vol", id)
	for _, n := range nested {
		if hasQgroup(t, root, n) {
			t.Errorf("qgroup 0/%d of a nested subvolume remains", n)
		}
	}
	if _, err := b.Usage(t.Context(), "other"); err != nil {
		t.Errorf("the volume beside it (and the symlink to the root): %v", err)
	}
}

// TestRecoverLeavesAnUnfinishedVolumeInUse: a volume whose record says
// creating or deleting is removed at start only when no mount other than
// its own shows it; one a pod's bind mount shows keeps its data and its
// record, and Recover says why.
func TestRecoverLeavesAnUnfinishedVolumeInUse(t *testing.T) {
	root := btrfsRoot(t, true)
	b, _ := open(t, Config{Root: root})
	j := journal{dir: filepath.Join(root, ".capacity")}
	dir, err := b.Create(t.Context(), "used", 8*mi)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data"), []byte("in use"), 0o600); err != nil {
		t.Fatal(err)
	}
	pod := t.TempDir()
	sh(t, "mount", "--bind", dir, pod)
	t.Cleanup(func() { _ = unix.Unmount(pod, unix.MNT_DETACH) })
	r, err := j.load("used")
	if err != nil {
		t.Fatal(err)
	}
	r.State = creating
	if err := j.save(r); err != nil {
		t.Fatal(err)
	}
	b2, _ := open(t, Config{Root: root})
	vols, err := b2.Recover(t.Context())
	if err == nil || !strings.Contains(err.Error(), "is mounted at "+pod) || len(vols) != 0 {
		t.Fatalf("Recover = %v, %v; want the volume in use left, saying where it is mounted", vols, err)
	}
	if got, err := os.ReadFile(filepath.Join(pod, "data")); err != nil || string(got) != "in use" {
		t.Fatalf("the volume in use: %q, %v", got, err)
	}
	if _, err := j.load("used"); err != nil {
		t.Fatalf("its record: %v", err)
	}
	if err := unix.Unmount(pod, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := b2.Recover(t.Context()); err != nil {
		t.Fatalf("Recover once unused: %v", err)
	}
	checkGone(t, root, "used", r.ID)
}

// TestBtrfsNestedSubvolumeCountsAgainstTheSize: a subvolume an
// unprivileged user makes inside a 20 MiB volume is limited to the room
// the volume has left at the next measurement (Usage, as each usage pass
// does): a write of 25 MiB into it fails with EDQUOT, the bytes written
// inside it count in the volume's usage, and the deletion leaves neither
// subvolume behind.
func TestBtrfsNestedSubvolumeCountsAgainstTheSize(t *testing.T) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("needs setpriv (util-linux)")
	}
	root := btrfsRoot(t, true)
	if err := os.Chmod(filepath.Dir(root), 0o755); err != nil { //nolint:gosec // G302: nobody must reach the volume
		t.Fatal(err)
	}
	b, _ := open(t, Config{Root: root})
	dir, err := b.Create(t.Context(), "vol", 20*mi)
	if err != nil {
		t.Fatal(err)
	}
	id := subvolumeID(t, dir)
	nobody := func(script string) (string, error) {
		cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--", "sh", "-c", script)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := nobody("btrfs subvolume create nested && dd if=/dev/zero of=nested/f bs=1M count=4 conv=fsync"); err != nil {
		t.Fatalf("a nested subvolume as nobody: %v: %s", err, out)
	}
	if _, err := b.Usage(t.Context(), "vol"); err != nil {
		t.Fatal(err)
	}
	if out, err := nobody("dd if=/dev/zero of=nested/g bs=1M count=25 conv=fsync"); err == nil || !strings.Contains(out, "Disk quota exceeded") {
		t.Errorf("25 MiB more into the nested subvolume of a 20 MiB volume: %v: %s; want EDQUOT", err, out)
	}
	sh(t, "sync")
	u, err := b.Usage(t.Context(), "vol")
	if err != nil || u.UsedBytes < 16*mi || u.UsedBytes > 21*mi {
		t.Errorf("usage %+v, %v; want the nested subvolume's 16-20 MiB counted", u, err)
	}
	if err := b.Delete(t.Context(), "vol"); err != nil {
		t.Fatal(err)
	}
	checkGone(t, root, "vol", id)
}

// TestBtrfsDeleteWithQuotasOff: a volume made while quotas were on is
// deleted after they were turned off (which dropped every qgroup):
// there is no qgroup left to destroy, and nothing to wait for.
func TestBtrfsDeleteWithQuotasOff(t *testing.T) {
	root := btrfsRoot(t, true)
	b, _ := open(t, Config{Root: root})
	dir, err := b.Create(t.Context(), "vol", 4*mi)
	if err != nil {
		t.Fatal(err)
	}
	sh(t, "btrfs", "quota", "disable", root)
	if err := b.Delete(t.Context(), "vol"); err != nil {
		t.Fatalf("delete with quotas off: %v", err)
	}
	if ok, err := lexists(dir); err != nil || ok {
		t.Errorf("the subvolume is still there (%t, %v)", ok, err)
	}
}
