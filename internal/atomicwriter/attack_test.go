package atomicwriter

import (
	"os"
	"path"
	"path/filepath"
	"syscall"
	"testing"
	"time"
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

// TestAttackFIFOSwappedIntoPayload plays a container that swaps an entry of
// the current payload for a FIFO after the comparison listed it and before
// it opens it. Opening a FIFO to read blocks until someone opens it to
// write, so Write would hang for good: the comparison must open without
// blocking, take the FIFO as a difference and rewrite the payload.
func TestAttackFIFOSwappedIntoPayload(t *testing.T) {
	payload := map[string]File{"key1": file("v1", 0o644), "sub/x": file("x1", 0o644)}
	for _, victim := range []string{".", "key1", "sub", "sub/x"} {
		t.Run(victim, func(t *testing.T) {
			dir, w := newVolume(t)
			mustWrite(t, w, payload)
			old := dataTarget(t, dir)
			target := path.Join(old, victim)
			fifo := filepath.Join(dir, target)
			w.beforeOpen = func(name string) {
				if name != target {
					return
				}
				w.beforeOpen = nil // Write's goroutine is the only one using it now
				if err := os.RemoveAll(fifo); err != nil {
					t.Errorf("remove %s: %v", target, err)
				}
				if err := syscall.Mkfifo(fifo, 0o644); err != nil {
					t.Errorf("mkfifo %s: %v", target, err)
				}
			}
			changed, err := writeUnblocking(t, w, payload, fifo)
			if !changed || err != nil {
				t.Fatalf("Write = %v, %v; want the payload rewritten", changed, err)
			}
			assertContent(t, dir, "key1", "v1")
			assertContent(t, dir, "sub/x", "x1")
			if victim != "." {
				assertMissing(t, filepath.Join(dir, old))
			}
		})
	}
}

// writeUnblocking runs Write and fails the test unless it returns within a
// few seconds; it then frees a Write stuck opening fifo by opening the FIFO's
// other end, so that a failing test ends instead of hanging.
func writeUnblocking(t *testing.T, w *Writer, payload map[string]File, fifo string) (bool, error) {
	t.Helper()
	type result struct {
		changed bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		changed, err := w.Write(payload)
		done <- result{changed, err}
	}()
	select {
	case r := <-done:
		return r.changed, r.err
	case <-time.After(5 * time.Second):
		t.Errorf("Write still blocked after 5s: it opened the FIFO %s and waits for a writer", fifo)
	}
	for {
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = f.Close()
		}
		select {
		case r := <-done:
			return r.changed, r.err
		case <-time.After(10 * time.Millisecond):
		}
	}
}
