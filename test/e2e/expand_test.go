package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// expandableClass is enforcedClass with allowVolumeExpansion.
const expandableClass = enforcedClass + "allowVolumeExpansion: true\n"

// mountID is the ID of the mount path is on.
func mountID(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_MNT_ID, &st); err != nil {
		t.Fatal(err)
	}
	return st.Mnt_id
}

// checkExpands runs a 100Mi claim of expandableClass on an agent with
// root as --local-path-root: 150 MiB do not fit (the write fails with
// full); its manifest raised to 200Mi, they do, in the same volume (id,
// and the mount of the pod's volume), without the pod's volume being set
// up again, and /v1/claims shows 200Mi. A request lowered again is refused
// with the reason, and the volume keeps its size and data; a crash and a
// restart keep them too.
func checkExpands(t *testing.T, root string, full error, id func(t *testing.T, path string) uint64) {
	a := newAgent(t)
	a.start("--provisioners", "local", "--local-path-root", root, "--reclaim-delay", "0s")
	a.writeManifest("class.yaml", expandableClass)
	a.writeManifest("claim.yaml", enforcedClaim)
	a.writeManifest("pod.yaml", writerPod)
	v := a.waitPod("default", "writer", 60*time.Second, ready).volume("store")
	mnt, vol := mountID(t, v.Path), id(t, v.Path)
	if v.Since.IsZero() {
		t.Fatalf("volume %+v: no since", v)
	}
	big := filepath.Join(v.Path, "big")
	if n, err := fill(big, 150<<20); !errors.Is(err, full) {
		t.Fatalf("writing 150 MiB into a 100Mi volume: %d bytes, then %v; want %v", n, err, full)
	}
	if err := os.Remove(big); err != nil {
		t.Fatal(err)
	}

	a.writeManifest("claim.yaml", strings.Replace(enforcedClaim, "100Mi", "200Mi", 1))
	waitFor(t, 30*time.Second, "the claim expanded to 200Mi", func() (bool, string) {
		c := claimOf(a.claims(), "data")
		return c.Capacity == "200Mi" && c.Error == "", fmt.Sprintf("%+v", c)
	})
	if n, err := fill(big, 150<<20); err != nil {
		t.Fatalf("150 MiB into the volume expanded to 200Mi: %d bytes, %v", n, err)
	}
	after := a.waitPod("default", "writer", 10*time.Second, ready).volume("store")
	if after.Path != v.Path || !after.Since.Equal(v.Since) || mountID(t, after.Path) != mnt || id(t, after.Path) != vol {
		t.Errorf("the pod's volume changed with the expansion: %+v (mount %d, volume %d), was %+v (mount %d, volume %d)",
			after, mountID(t, after.Path), id(t, after.Path), v, mnt, vol)
	}

	a.writeManifest("claim.yaml", enforcedClaim) // 100Mi again: refused
	waitFor(t, 30*time.Second, "the shrink refused", func() (bool, string) {
		c := claimOf(a.claims(), "data")
		return strings.Contains(c.Error, "is below the capacity 200Mi") && c.Capacity == "200Mi", fmt.Sprintf("%+v", c)
	})
	if st, err := os.Stat(big); err != nil || st.Size() != 150<<20 {
		t.Errorf("after the refused shrink, the volume's file: %v, %v; want 150 MiB", st, err)
	}

	// A crash and a restart keep the size: the expansion is recorded.
	a.restart(true)
	a.writeManifest("claim.yaml", strings.Replace(enforcedClaim, "100Mi", "200Mi", 1))
	v = a.waitPod("default", "writer", 60*time.Second, ready).volume("store")
	waitFor(t, 30*time.Second, "200Mi after a restart", func() (bool, string) {
		c := claimOf(a.claims(), "data")
		return c.Capacity == "200Mi" && c.Error == "", fmt.Sprintf("%+v", c)
	})
	if st, err := os.Stat(filepath.Join(v.Path, "big")); err != nil || st.Size() != 150<<20 {
		t.Errorf("after a restart, the volume's file: %v, %v; want 150 MiB", st, err)
	}
}

// TestEnforcedClaimExpandsOnBtrfs: checkExpands on a btrfs root, where the
// qgroup limit of the same subvolume is raised.
func TestEnforcedClaimExpandsOnBtrfs(t *testing.T) {
	checkExpands(t, btrfsLocalRoot(t, true), unix.EDQUOT, subvolumeID)
}

// TestEnforcedClaimExpandsOnImages: checkExpands on an ext4 image, grown
// and resized online (the same file system: its device). Growing a mounted
// ext4 needs CAP_SYS_RESOURCE, which a privileged agent has.
func TestEnforcedClaimExpandsOnImages(t *testing.T) {
	root := imageLocalRoot(t)
	if !capSysResource(t) {
		t.Skip("needs CAP_SYS_RESOURCE, which the kernel requires to grow a mounted ext4 (this process's bounding set lacks it); TestEnforcedClaimExpandsOnBtrfs covers expansion")
	}
	checkExpands(t, root, unix.ENOSPC, func(t *testing.T, path string) uint64 {
		t.Helper()
		var st unix.Stat_t
		if err := unix.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Dev
	})
}

// capSysResource reports whether this process has CAP_SYS_RESOURCE.
func capSysResource(t *testing.T) bool {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if hex, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return caps&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return false
}

// TestClaimNotExpandedWithoutAllowVolumeExpansion: a class without
// allowVolumeExpansion keeps the claim at its size, with the reason.
func TestClaimNotExpandedWithoutAllowVolumeExpansion(t *testing.T) {
	root := btrfsLocalRoot(t, true)
	a := newAgent(t)
	a.start("--provisioners", "local", "--local-path-root", root, "--reclaim-delay", "0s")
	a.writeManifest("class.yaml", enforcedClass)
	a.writeManifest("claim.yaml", enforcedClaim)
	a.writeManifest("pod.yaml", writerPod)
	v := a.waitPod("default", "writer", 60*time.Second, ready).volume("store")
	a.writeManifest("claim.yaml", strings.Replace(enforcedClaim, "100Mi", "200Mi", 1))
	waitFor(t, 30*time.Second, "the expansion refused", func() (bool, string) {
		c := claimOf(a.claims(), "data")
		return strings.Contains(c.Error, `does not allow volume expansion`) && c.Capacity == "100Mi", fmt.Sprintf("%+v", c)
	})
	if n, err := fill(filepath.Join(v.Path, "big"), 150<<20); !errors.Is(err, unix.EDQUOT) {
		t.Errorf("150 MiB into the 100Mi volume not expanded: %d bytes, then %v; want EDQUOT", n, err)
	}
}
