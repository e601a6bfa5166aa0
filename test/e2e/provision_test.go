package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// localClassManifest is a StorageClass of the local provisioner, of plain
// directories (enforce "false": these tests are about directories, moved
// aside and archived; capacity_test.go has the enforced ones).
const localClassManifest = `
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata: {name: %s}
provisioner: volume-agent.io/local
volumeBindingMode: WaitForFirstConsumer
reclaimPolicy: %s
parameters: {archiveOnDelete: "%v", enforce: "false"}
`

// classClaim is a claim named %s of class %s.
const classClaim = `
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: %s}
spec:
  storageClassName: %s
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
`

// classPod uses claim %s as volume "store".
const classPod = `
apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  containers: [{name: c, image: busybox}]
  volumes: [{name: store, persistentVolumeClaim: {claimName: %s}}]
`

// TestManifestDynamicProvisioning: with no cluster, a claim of a
// volume-agent.io/local class in the manifest directory gets a directory
// under --local-path-root and a PV in the binder's state; the pod is ready
// with it mounted; restarts (SIGTERM, SIGKILL) neither provision again nor
// remount; deleting the pod keeps the data; deleting the claim removes the
// directory (Delete), archives it (archiveOnDelete) or keeps it (Retain).
func TestManifestDynamicProvisioning(t *testing.T) {
	a := newAgent(t)
	symlinkedRoot(t, a)
	// --local-path-root reached through a symlink, as a symlinked /var/lib
	// would: the agent resolves it once.
	data := filepath.Join(t.TempDir(), "local")
	if err := os.Symlink(t.TempDir(), data); err != nil {
		t.Fatal(err)
	}
	a.writeManifest("classes.yaml", fmt.Sprintf(localClassManifest, "gone", "Delete", false)+"---"+
		fmt.Sprintf(localClassManifest, "archive", "Delete", true)+"---"+fmt.Sprintf(localClassManifest, "keep", "Retain", false))
	// nested is of class gone, with a bind mount nested in its directory
	// when it is released.
	claims := []string{"gone", "archive", "keep", "nested"}
	class := map[string]string{"gone": "gone", "archive": "archive", "keep": "keep", "nested": "gone"}
	for _, c := range claims {
		a.writeManifest("claim-"+c+".yaml", fmt.Sprintf(classClaim, c, class[c]))
		a.writeManifest("pod-"+c+".yaml", fmt.Sprintf(classPod, "use-"+c, c))
	}
	// Deleted at once, with no reclaim delay (deferred deletion has its own
	// tests).
	a.start("--provisioners", "local", "--local-path-root", data, "--reclaim-delay", "0s")
	dirs := map[string]string{} // claim → directory
	for _, c := range claims {
		p := a.waitPod("default", "use-"+c, 20*time.Second, ready)
		v := p.volume("store")
		if v.Claim != c || !strings.HasPrefix(v.PV, "pvc-") || filepath.Base(v.Path) != v.PV {
			t.Fatalf("volume of use-%s = %+v", c, v)
		}
		dirs[c] = filepath.Join(data, "default-"+c+"-"+v.PV)
		if err := os.WriteFile(filepath.Join(v.Path, "written"), []byte("by use-"+c), 0o644); err != nil {
			t.Fatal(err)
		}
		checkFile(t, filepath.Join(dirs[c], "written"), "by use-"+c)
	}
	want := slices.Sorted(func(yield func(string) bool) {
		for _, d := range dirs {
			if !yield(filepath.Base(d)) {
				return
			}
		}
	})
	if got := entries(t, data); !slices.Equal(got, want) {
		t.Fatalf("%s holds %v, want %v", data, got, want)
	}

	ids := mountIDsUnder(t, a.resolvedRoot())
	for _, crash := range []bool{false, true} {
		a.restart(crash)
		for _, c := range claims {
			if v := a.waitPod("default", "use-"+c, 20*time.Second, ready).volume("store"); filepath.Base(dirs[c]) != "default-"+c+"-"+v.PV {
				t.Errorf("after a restart (crash %v) use-%s has PV %s", crash, c, v.PV)
			}
		}
		if got := entries(t, data); !slices.Equal(got, want) {
			t.Errorf("after a restart (crash %v) %s holds %v, want %v", crash, data, got, want)
		}
		if after := mountIDsUnder(t, a.resolvedRoot()); after != ids {
			t.Errorf("a restart (crash %v) remounted: %s -> %s", crash, ids, after)
		}
	}

	for _, c := range claims {
		a.removeManifest("pod-" + c + ".yaml")
	}
	waitFor(t, 20*time.Second, "the pods torn down", func() (bool, string) {
		return len(a.pods()) == 0, fmt.Sprint(len(a.pods()), " pods")
	})
	// A directory of the same file system bind-mounted inside a released
	// volume holds its deletion back: nothing below the mount, and nothing
	// of the volume, is removed until it is gone.
	src := disk(t, "nested-source")
	nested := filepath.Join(dirs["nested"], "mnt")
	if err := os.Mkdir(nested, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "--bind", src, nested).CombinedOutput(); err != nil {
		t.Fatalf("bind mount: %v: %s", err, out)
	}
	unmounted := false
	t.Cleanup(func() {
		if !unmounted {
			_ = exec.Command("umount", "-l", nested).Run()
		}
	})
	for _, c := range claims {
		checkFile(t, filepath.Join(dirs[c], "written"), "by use-"+c)
		a.removeManifest("claim-" + c + ".yaml")
	}
	held := []string{"archived-" + filepath.Base(dirs["archive"]), filepath.Base(dirs["keep"]), filepath.Base(dirs["nested"])}
	waitFor(t, 20*time.Second, "the released volumes deleted or archived, but the one with a mount inside", func() (bool, string) {
		got := entries(t, data)
		return slices.Equal(got, held), fmt.Sprint(got)
	})
	time.Sleep(2 * time.Second) // deletion is retried meanwhile; it must keep refusing
	checkFile(t, filepath.Join(dirs["nested"], "written"), "by use-nested")
	checkFile(t, filepath.Join(nested, "label"), "nested-source")
	if out, err := exec.Command("umount", nested).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v: %s", err, out)
	}
	unmounted = true
	checkFile(t, filepath.Join(src, "label"), "nested-source")
	waitFor(t, 60*time.Second, "the volume deleted once nothing is mounted in it", func() (bool, string) {
		got := entries(t, data)
		return slices.Equal(got, held[:2]), fmt.Sprint(got)
	})
	checkFile(t, filepath.Join(data, "archived-"+filepath.Base(dirs["archive"]), "written"), "by use-archive")
	checkFile(t, filepath.Join(dirs["keep"], "written"), "by use-keep")
	// A record is dropped by the pass after its storage is gone.
	waitFor(t, 20*time.Second, "only the Retain claim left in /v1/claims, Released", func() (bool, string) {
		got := a.claims()
		return len(got) == 1 && got[0].Name == "keep" && got[0].Phase == "Released", fmt.Sprintf("%+v", got)
	})
}
