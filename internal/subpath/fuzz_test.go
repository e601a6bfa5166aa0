package subpath

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
)

// FuzzSubPath opens subPaths that Check accepts in a volume where a pod
// planted symlinks (to the host, up, to the root, to itself, in a loop,
// dangling), making what is missing as the agent does: what is opened is
// always inside the volume, and nothing outside it is ever made or
// changed. The whole of Prepare adds only a bind mount of the descriptor
// checked here.
func FuzzSubPath(f *testing.F) {
	for _, s := range []string{"a", "a/b", "a/b/file", "out", "out/x", "a/up/x", "a/root/etc", "new/dir", "a/self/b",
		"a/loop", "a/dangling/x", "./a//b/", "a/b/file/x", "a/b/new/../x", "..."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sub string) {
		if Check(sub) != nil {
			return
		}
		base := t.TempDir()
		vol, out := filepath.Join(base, "volume"), filepath.Join(base, "host")
		plugintest.WriteFile(t, filepath.Join(vol, "a/b/file"), "pod data")
		plugintest.WriteFile(t, filepath.Join(out, "secret"), "host data")
		for link, to := range map[string]string{"out": out, "a/up": "../..", "a/root": "/", "a/self": ".",
			"a/loop": "loop", "a/dangling": filepath.Join(out, "missing"), "a/b/host": filepath.Join(out, "secret")} {
			if err := os.Symlink(to, filepath.Join(vol, link)); err != nil {
				t.Fatal(err)
			}
		}
		before := listing(t, out)
		volFD, err := Preparer{Root: "/nonexistent"}.openVolume(vol)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(volFD)
		fd, err := openBeneath(volFD, sub, 0o755)
		if err == nil {
			defer unix.Close(fd)
			got, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
			if err != nil {
				t.Fatal(err)
			}
			if got != vol && !strings.HasPrefix(got, vol+"/") {
				t.Fatalf("subPath %q opened %s, outside the volume %s", sub, got, vol)
			}
		}
		if after := listing(t, out); after != before {
			t.Fatalf("subPath %q changed the host: %s, was %s", sub, after, before)
		}
		if _, err := os.Lstat(filepath.Join(base, "new")); err == nil {
			t.Fatalf("subPath %q made a directory beside the volume", sub)
		}
	})
}
