package atomicwriter

import (
	"os"
	"path/filepath"
	"testing"
)

// These tests play a container that plants symlinks in its writable volume,
// hoping the root-running writer follows them to the host. "host" is a
// directory outside the volume that must come out of every write unchanged.

// newAttackedVolume returns a volume directory, its Writer and a host
// directory beside it holding a file and a subdirectory.
func newAttackedVolume(t *testing.T) (dir string, w *Writer, host string) {
	t.Helper()
	dir, w = newVolume(t)
	host = filepath.Join(filepath.Dir(dir), "host")
	must(t, os.MkdirAll(filepath.Join(host, "sub"), 0o700))
	must(t, os.WriteFile(filepath.Join(host, "passwd"), []byte("root:x:0:0"), 0o600))
	must(t, os.WriteFile(filepath.Join(host, "key1"), []byte("host key1"), 0o600))
	must(t, os.WriteFile(filepath.Join(host, "sub", "x"), []byte("host x"), 0o600))
	return dir, w, host
}

func replaceWithSymlink(t *testing.T, target, name string) {
	t.Helper()
	must(t, os.RemoveAll(name))
	must(t, os.Symlink(target, name))
}

func TestAttackPlantedDataLink(t *testing.T) {
	for _, target := range []string{"HOST", "../host", "/etc"} {
		t.Run(target, func(t *testing.T) {
			dir, w, host := newAttackedVolume(t)
			if target == "HOST" {
				target = host
			}
			must(t, os.Symlink(target, filepath.Join(dir, dataLink)))
			// Only the entries a followed link would hit are checked in /etc,
			// which other processes may change while the test runs.
			hostBefore, passwdBefore := snapshot(t, host), snapshot(t, "/etc/passwd")
			payload := map[string]File{"key1": file("new", 0o644), "sub/x": file("new x", 0o777), "passwd": file("p", 0o666)}
			if !mustWrite(t, w, payload) {
				t.Fatal("write over a planted ..data reported no change")
			}
			assertSameSnapshot(t, hostBefore, snapshot(t, host))
			assertSameSnapshot(t, passwdBefore, snapshot(t, "/etc/passwd"))
			assertMissing(t, "/etc/key1")
			assertMissing(t, "/etc/sub")
			assertEntries(t, dir, dataTarget(t, dir), dataLink, "key1", "sub", "passwd")
			assertContent(t, dir, "sub/x", "new x")
		})
	}
}

func TestAttackPlantedTopLevelLink(t *testing.T) {
	dir, w, host := newAttackedVolume(t)
	payload := map[string]File{"key1": file("v1", 0o644), "sub/x": file("x1", 0o644)}
	mustWrite(t, w, payload)
	replaceWithSymlink(t, filepath.Join(host, "passwd"), filepath.Join(dir, "key1"))
	replaceWithSymlink(t, host+"/sub", filepath.Join(dir, "sub"))
	// A link of a foreign form at a name the payload no longer has.
	must(t, os.Symlink(filepath.Join(host, "passwd"), filepath.Join(dir, "gone")))
	before := snapshot(t, host)

	if mustWrite(t, w, payload) {
		t.Fatal("repairing links reported a payload change")
	}
	assertSameSnapshot(t, before, snapshot(t, host))
	assertContent(t, dir, "key1", "v1")

	replaceWithSymlink(t, filepath.Join(host, "passwd"), filepath.Join(dir, "key1"))
	mustWrite(t, w, map[string]File{"key1": file("v2", 0o600)})
	assertSameSnapshot(t, before, snapshot(t, host))
	assertContent(t, dir, "key1", "v2")
	assertEntries(t, dir, dataTarget(t, dir), dataLink, "key1", "gone")
	if got := readLink(t, filepath.Join(dir, "gone")); got != filepath.Join(host, "passwd") {
		t.Fatalf("foreign link gone -> %q was modified", got)
	}
}

func TestAttackLinksInsidePayloadDirectory(t *testing.T) {
	dir, w, host := newAttackedVolume(t)
	payload := map[string]File{"key1": file("v1", 0o644), "sub/x": file("x1", 0o644), "sub/y/z": file("z1", 0o644)}
	mustWrite(t, w, payload)
	ts := filepath.Join(dir, dataTarget(t, dir))
	replaceWithSymlink(t, filepath.Join(host, "key1"), filepath.Join(ts, "key1"))
	replaceWithSymlink(t, filepath.Join(host, "sub"), filepath.Join(ts, "sub"))
	before := snapshot(t, host)

	// The tampered payload differs from the wanted one: it is rewritten, and
	// the old directory removed without following the planted links.
	if !mustWrite(t, w, payload) {
		t.Fatal("tampered payload directory was not rewritten")
	}
	assertSameSnapshot(t, before, snapshot(t, host))
	assertMissing(t, ts)
	assertContent(t, dir, "key1", "v1")
	assertContent(t, dir, "sub/y/z", "z1")
}

func TestAttackTimestampNamedLink(t *testing.T) {
	dir, w, host := newAttackedVolume(t)
	fake := "..2020_01_02_03_04_05.99"
	must(t, os.Symlink(host, filepath.Join(dir, fake)))
	must(t, os.Symlink(fake, filepath.Join(dir, dataLink)))
	before := snapshot(t, host)
	if !mustWrite(t, w, map[string]File{"key1": file("v1", 0o644), "passwd": file("p", 0o644)}) {
		t.Fatal("..data pointing at a symlink was taken as the current payload")
	}
	assertSameSnapshot(t, before, snapshot(t, host))
	assertEntries(t, dir, dataTarget(t, dir), dataLink, fake, "key1", "passwd")
}

func TestAttackPlantedDataTmp(t *testing.T) {
	dir, w, host := newAttackedVolume(t)
	mustWrite(t, w, map[string]File{"key1": file("v1", 0o644)})
	must(t, os.Symlink(host, filepath.Join(dir, dataTmp)))
	before := snapshot(t, host)
	mustWrite(t, w, map[string]File{"key1": file("v2", 0o644)})
	assertSameSnapshot(t, before, snapshot(t, host))
	assertEntries(t, dir, dataTarget(t, dir), dataLink, "key1")
}

func TestAttackPlantedLinkInRepairedPath(t *testing.T) {
	// ..data_tmp planted during an unchanged write's link repair.
	dir, w, host := newAttackedVolume(t)
	payload := map[string]File{"key1": file("v1", 0o644)}
	mustWrite(t, w, payload)
	replaceWithSymlink(t, filepath.Join(host, "key1"), filepath.Join(dir, "key1"))
	must(t, os.Symlink(filepath.Join(host, "sub"), filepath.Join(dir, dataTmp)))
	before := snapshot(t, host)
	if mustWrite(t, w, payload) {
		t.Fatal("link repair reported a payload change")
	}
	assertSameSnapshot(t, before, snapshot(t, host))
	assertContent(t, dir, "key1", "v1")
}
