package e2e

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// TestEnforcedClaimExpandsOnBtrfs: on a btrfs --local-path-root, a 100Mi
// claim of a class with allowVolumeExpansion cannot take 150 MiB; its
// manifest raised to 200Mi, it takes them, in the same subvolume, without
// the pod's volume being set up again or remounted, and /v1/claims shows
// 200Mi. A request lowered again is refused with the reason, and the
// volume keeps its size.
func TestEnforcedClaimExpandsOnBtrfs(t *testing.T) {
	root := btrfsLocalRoot(t, true)
	a := newAgent(t)
	a.start("--provisioners", "local", "--local-path-root", root, "--reclaim-delay", "0s")
	a.writeManifest("class.yaml", expandableClass)
	a.writeManifest("claim.yaml", enforcedClaim)
	a.writeManifest("pod.yaml", writerPod)
	v := a.waitPod("default", "writer", 60*time.Second, ready).volume("store")
	mnt, subvol := mountID(t, v.Path), subvolumeID(t, v.Path)
	if v.Since.IsZero() {
		t.Fatalf("volume %+v: no since", v)
	}
	big := filepath.Join(v.Path, "big")
	if n, err := fill(big, 150<<20); !errors.Is(err, unix.EDQUOT) {
		t.Fatalf("writing 150 MiB into a 100Mi volume: %d bytes, then %v; want EDQUOT", n, err)
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
	if after.Path != v.Path || !after.Since.Equal(v.Since) || mountID(t, after.Path) != mnt || subvolumeID(t, after.Path) != subvol {
		t.Errorf("the pod's volume changed with the expansion: %+v (mount %d, subvolume %d), was %+v (mount %d, subvolume %d)",
			after, mountID(t, after.Path), subvolumeID(t, after.Path), v, mnt, subvol)
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
	a.waitPod("default", "writer", 60*time.Second, ready)
	waitFor(t, 30*time.Second, "200Mi after a restart", func() (bool, string) {
		c := claimOf(a.claims(), "data")
		return c.Capacity == "200Mi" && c.Error == "", fmt.Sprintf("%+v", c)
	})
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
