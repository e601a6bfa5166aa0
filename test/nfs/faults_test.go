package nfstest

import (
	"bytes"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The server dies while mounted (Stop: the way a killed server looks)
// and comes back (Restart). These are the faults the agent's NFS tests
// inject.

// softOptions make a request fail after 1 s + 2 s without an answer.
var softOptions = []string{"soft", "timeo=10", "retrans=1"}

func TestDeadNFSServerFailsSoftRequestsInBoundedTimeAndHealsOnRestart(t *testing.T) {
	f := newFixture(t)
	writeFile(t, filepath.Join(f.export, "a.txt"), "before")
	f.mount(t, softOptions...)
	held, err := os.Open(f.path("a.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()

	f.srv.Stop()
	took, err := within(t, 30*time.Second, "stat on a soft mount of a dead server", func() error {
		_, err := os.Stat(f.path("a.txt"))
		return err
	})
	if !errors.Is(err, syscall.EIO) {
		t.Errorf("stat on a soft mount of a dead server: %v, want EIO", err)
	}
	t.Logf("stat failed after %v with %v (soft,timeo=10,retrans=1: 3 s)", took, err)

	f.srv.Restart()
	healed := waitFor(t, 30*time.Second, "the mount to heal", func() error {
		_, err := os.Stat(f.path("a.txt"))
		return err
	})
	t.Logf("stat succeeded %v after the restart", healed)
	if got := readFile(t, f.path("a.txt")); got != "before" {
		t.Errorf("read %q after the restart, want %q", got, "before")
	}
	// A file opened before the server died reads on: its handle is still
	// valid on the restarted server.
	buf := make([]byte, 16)
	if n, err := held.ReadAt(buf, 0); string(buf[:n]) != "before" {
		t.Errorf("read %q (%v) through a descriptor opened before the restart", buf[:n], err)
	}
	writeFile(t, f.path("after.txt"), "after")
	if got := readFile(t, filepath.Join(f.export, "after.txt")); got != "after" {
		t.Errorf("server has %q after a write through the healed mount", got)
	}
}

func TestDeadNFSServerHoldsHardRequestsUntilItComesBack(t *testing.T) {
	f := newFixture(t)
	writeFile(t, filepath.Join(f.export, "a.txt"), "before")
	f.mount(t) // hard, the default

	f.srv.Stop()
	var out bytes.Buffer
	stat := f.ns.Command("stat", "-c", "%s", f.dir+"/a.txt")
	stat.Stdout, stat.Stderr = &out, &out
	if err := stat.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- stat.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("stat on a hard mount of a dead server returned (%v: %s), want it to wait", err, out.String())
	case <-time.After(2 * time.Second):
	}

	f.srv.Restart()
	select {
	case err := <-exited:
		if err != nil || strings.TrimSpace(out.String()) != "6" {
			t.Errorf("stat once the server came back: %v, %q; want the size 6", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("stat on a hard mount still waiting 30s after the server came back")
	}
}

func TestUnmountOfDeadNFSMountSucceedsAndDeletesNothing(t *testing.T) {
	tests := []struct {
		name    string
		options []string
		umount  []string
	}{
		{name: "soft, umount -f", options: softOptions, umount: []string{"-f"}},
		{name: "soft, umount -l", options: softOptions, umount: []string{"-l"}},
		// Plain umount asks for the mount point's attributes first: on
		// a soft mount that fails after the major timeout, and the
		// unmount goes on. (On a hard mount it waits for the server,
		// as with a kernel NFS client.)
		{name: "soft, umount", options: softOptions},
		{name: "hard, umount -f", umount: []string{"-f"}},
		{name: "hard, umount -l", umount: []string{"-l"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			must(t, os.MkdirAll(filepath.Join(f.export, "dir/sub"), 0o755))
			writeFile(t, filepath.Join(f.export, "dir/sub/file"), "kept")
			f.mount(t, tt.options...)
			writeFile(t, f.path("made-by-client"), "kept too")
			must(t, os.Symlink("dir", f.path("link")))
			before := tree(t, f.export)

			f.srv.Stop()
			args := append(append([]string{}, tt.umount...), f.dir)
			if out, err := f.run(t, 30*time.Second, "umount", args...); err != nil {
				t.Fatalf("umount %v of a dead mount: %v\n%s", args, err, out)
			}
			if f.mounted(t) {
				t.Errorf("%s still mounted after umount %v", f.dir, args)
			}
			f.waitNoHelper(t, 10*time.Second)
			if after := tree(t, f.export); !maps.Equal(before, after) {
				t.Errorf("server's directory changed by the unmount:\nbefore %v\nafter  %v", before, after)
			}
		})
	}
}

func TestKilledMountNFSMountsNothingLater(t *testing.T) {
	f := newFixture(t)
	f.srv.Stop()
	mount := f.ns.Command("mount", "-t", "nfs", f.srv.Spec("/"), f.dir, "-o", f.srv.MountOptions())
	mount.SysProcAttr.Setpgid = true // mount(8) and mount.nfs, as a caller with a deadline kills them
	if err := mount.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // mount.nfs keeps asking the stopped server
	must(t, syscall.Kill(-mount.Process.Pid, syscall.SIGKILL))
	_ = mount.Wait()

	f.srv.Restart()
	time.Sleep(2 * time.Second) // the helper would reconnect within 1 s
	if f.mounted(t) {
		t.Errorf("%s got mounted after mount(8) and mount.nfs were killed", f.dir)
	}
	if p := f.ns.Processes(); len(p) > 0 {
		t.Errorf("processes %v left after mount(8) and mount.nfs were killed", p)
	}
}

// run runs name with args inside the namespace and returns its combined
// output, failing the test if it takes longer than limit.
func (f *fixture) run(t *testing.T, limit time.Duration, name string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := f.ns.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		return out.String(), err
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatalf("%s %v still running after %v", name, args, limit)
		return "", nil
	}
}

// tree describes everything under dir: each path with its content, "dir",
// or "-> target".
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		switch {
		case d.IsDir():
			out[rel] = "dir"
		case d.Type() == fs.ModeSymlink:
			target, err := os.Readlink(path)
			out[rel] = "-> " + target
			return err
		default:
			content, err := os.ReadFile(path)
			out[rel] = string(content)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitFor retries op every 100 ms until it succeeds and returns how long
// that took, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, op func() error) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		err := op()
		if err == nil {
			return time.Since(start)
		}
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %v waiting for %s: %v", timeout, what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
