package nfstest

import (
	"bytes"
	"crypto/rand"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The agent mounts NFS with `mount -t nfs SERVER:/PATH DIR -o OPTS`
// (k8s.io/mount-utils). These tests take that path, util-linux's mount(8)
// running /sbin/mount.nfs, and follow the data both ways between the mount
// and the server's directory.

func TestMountNFSThroughUtilLinuxReachesTheExport(t *testing.T) {
	f := newFixture(t)
	f.mount(t)

	m, ok := f.ns.Mount(f.dir)
	if !ok {
		t.Fatalf("no mount on %s in the namespace after mount(8) succeeded", f.dir)
	}
	if m.Source != f.srv.Spec("/") {
		t.Errorf("mount source %q, want the remote target %q", m.Source, f.srv.Spec("/"))
	}
	if hostMounts := readHostMountinfo(t); strings.Contains(hostMounts, " "+f.dir+" ") {
		t.Errorf("the host sees the namespace's mount on %s:\n%s", f.dir, hostMounts)
	}

	t.Run("client to server", func(t *testing.T) { clientToServer(t, f) })
	t.Run("server to client", func(t *testing.T) { serverToClient(t, f) })
	t.Run("large file", func(t *testing.T) { largeFile(t, f) })

	if out, err := f.ns.Run("umount", f.dir); err != nil {
		t.Fatalf("umount %s: %v\n%s", f.dir, err, out)
	}
	if f.mounted(t) {
		t.Errorf("%s still mounted after umount", f.dir)
	}
	f.waitNoHelper(t, 10*time.Second)
}

// clientToServer changes files through the mount and checks the server's
// directory.
func clientToServer(t *testing.T, f *fixture) {
	writeFile(t, f.path("a.txt"), "hello")
	if got := readFile(t, filepath.Join(f.export, "a.txt")); got != "hello" {
		t.Errorf("server has %q after a write through the mount, want %q", got, "hello")
	}
	appendFile(t, f.path("a.txt"), ", world")
	if got := readFile(t, filepath.Join(f.export, "a.txt")); got != "hello, world" {
		t.Errorf("server has %q after an append, want %q", got, "hello, world")
	}
	must(t, os.Chmod(f.path("a.txt"), 0o600))
	checkMode(t, filepath.Join(f.export, "a.txt"), 0o600)

	must(t, os.Mkdir(f.path("d"), 0o750))
	checkMode(t, filepath.Join(f.export, "d"), os.ModeDir|0o750)
	must(t, os.Symlink("../a.txt", f.path("d/rel")))
	must(t, os.Symlink("/etc/hostname", f.path("d/abs")))
	for link, want := range map[string]string{"d/rel": "../a.txt", "d/abs": "/etc/hostname"} {
		if got, err := os.Readlink(filepath.Join(f.export, link)); err != nil || got != want {
			t.Errorf("server's %s points to %q (%v), want %q", link, got, err, want)
		}
	}

	// Removing a link removes the link, never what it points to.
	must(t, os.Remove(f.path("d/rel")))
	if _, err := os.Lstat(filepath.Join(f.export, "d/rel")); !os.IsNotExist(err) {
		t.Errorf("server still has the removed link d/rel: %v", err)
	}
	if _, err := os.Stat(filepath.Join(f.export, "a.txt")); err != nil {
		t.Errorf("removing a link to a.txt removed a.txt on the server: %v", err)
	}

	must(t, os.Rename(f.path("a.txt"), f.path("d/b.txt")))
	if _, err := os.Stat(filepath.Join(f.export, "a.txt")); !os.IsNotExist(err) {
		t.Errorf("server still has a.txt after the rename: %v", err)
	}
	if got := readFile(t, filepath.Join(f.export, "d/b.txt")); got != "hello, world" {
		t.Errorf("server's renamed file has %q", got)
	}
	must(t, os.Truncate(f.path("d/b.txt"), 5))
	if got := readFile(t, filepath.Join(f.export, "d/b.txt")); got != "hello" {
		t.Errorf("server has %q after a truncate to 5 bytes", got)
	}

	for _, name := range []string{"d/b.txt", "d/abs", "d"} {
		must(t, os.Remove(f.path(name)))
	}
	if entries, err := os.ReadDir(f.export); err != nil || len(entries) != 0 {
		t.Errorf("server's directory after removing everything: %v %v", entries, err)
	}
}

// serverToClient changes files in the server's directory and checks what
// the mount shows, at once: the helper caches nothing by default.
func serverToClient(t *testing.T, f *fixture) {
	writeFile(t, filepath.Join(f.export, "s.txt"), "from the server")
	if got := readFile(t, f.path("s.txt")); got != "from the server" {
		t.Errorf("mount shows %q, want the server's content", got)
	}
	writeFile(t, filepath.Join(f.export, "s.txt"), "changed")
	if got := readFile(t, f.path("s.txt")); got != "changed" {
		t.Errorf("mount shows %q after the server changed the file", got)
	}
	must(t, os.MkdirAll(filepath.Join(f.export, "sd/deeper"), 0o755))
	must(t, os.Symlink("deeper", filepath.Join(f.export, "sd/link")))
	entries, err := os.ReadDir(f.path("sd"))
	if err != nil || len(entries) != 2 || entries[0].Name() != "deeper" || !entries[0].IsDir() ||
		entries[1].Name() != "link" || entries[1].Type() != os.ModeSymlink {
		t.Errorf("mount lists %v (%v), want the directory deeper and the symlink link", entries, err)
	}
	if target, err := os.Readlink(f.path("sd/link")); err != nil || target != "deeper" {
		t.Errorf("mount's sd/link points to %q (%v)", target, err)
	}
	must(t, os.Remove(filepath.Join(f.export, "s.txt")))
	if _, err := os.Stat(f.path("s.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stat through the mount after the server removed the file: %v, want not found", err)
	}
	must(t, os.RemoveAll(filepath.Join(f.export, "sd")))
}

// largeFile writes and reads a file larger than one READ or WRITE.
func largeFile(t *testing.T, f *fixture) {
	data := make([]byte, 3<<20+123)
	_, _ = rand.Read(data)
	must(t, os.WriteFile(f.path("big"), data, 0o644))
	if got, err := os.ReadFile(filepath.Join(f.export, "big")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("server's copy of a %d-byte file differs (%d bytes, %v)", len(data), len(got), err)
	}
	if got, err := os.ReadFile(f.path("big")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("reading a %d-byte file back through the mount: %d bytes, %v", len(data), len(got), err)
	}
	must(t, os.Remove(f.path("big")))
}

func TestMountNFSReadOnlyRefusesWrites(t *testing.T) {
	f := newFixture(t)
	writeFile(t, filepath.Join(f.export, "kept"), "content")
	f.mount(t, "ro")

	if m, _ := f.ns.Mount(f.dir); !strings.Contains(","+m.Options+",", ",ro,") {
		t.Errorf("mount options %q, want ro", m.Options)
	}
	if got := readFile(t, f.path("kept")); got != "content" {
		t.Errorf("read %q through the read-only mount", got)
	}
	for what, err := range map[string]error{
		"create": os.WriteFile(f.path("new"), nil, 0o644),
		"write":  os.WriteFile(f.path("kept"), []byte("x"), 0o644),
		"mkdir":  os.Mkdir(f.path("dir"), 0o755),
		"remove": os.Remove(f.path("kept")),
	} {
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("%s on a read-only mount: %v, want EROFS", what, err)
		}
	}
	if got := readFile(t, filepath.Join(f.export, "kept")); got != "content" {
		t.Errorf("server's file changed to %q through a read-only mount", got)
	}
}

func TestMountNFSOverIPv6(t *testing.T) {
	if ln, err := net.Listen("tcp", "[::1]:0"); err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	} else {
		ln.Close()
	}
	f := newFixture(t, IPv6())
	if spec := f.srv.Spec("/"); !strings.HasPrefix(spec, "[::1]:") {
		t.Fatalf("spec %q, want an IPv6 address in brackets", spec)
	}
	f.mount(t)
	writeFile(t, f.path("six"), "over IPv6")
	if got := readFile(t, filepath.Join(f.export, "six")); got != "over IPv6" {
		t.Errorf("server has %q", got)
	}
}

func TestMountNFSRefusesUnknownOptionsBeforeMounting(t *testing.T) {
	f := newFixture(t)
	for _, opt := range []string{"bogus", "soft=1", "vers=4", "proto=udp", "lookupcache=maybe"} {
		out, err := f.ns.Run("mount", "-t", "nfs", f.srv.Spec("/"), f.dir, "-o", f.srv.MountOptions(opt))
		checkRefused(t, f, "-o "+opt, out, err)
	}
	out, err := f.ns.Run("mount", "-t", "nfs", f.srv.Spec("/"), f.dir, "-o", f.srv.MountOptions("bogus"))
	if !strings.Contains(out, `unknown option "bogus"`) {
		t.Errorf("refusal does not name the option: %q (%v)", out, err)
	}
}

func TestMountNFSRefusesSpecsStartingWithDash(t *testing.T) {
	f := newFixture(t)
	host, _, _ := strings.Cut(f.srv.Spec("/"), ":")
	for _, spec := range []string{"-oremount:/", host + ":-o"} {
		out, err := f.ns.Run("mount", "-t", "nfs", "-o", f.srv.MountOptions(), "--", spec, f.dir)
		checkRefused(t, f, spec, out, err)
		if !strings.Contains(out, "may not start with '-'") {
			t.Errorf("refusal of %s does not say why: %q", spec, out)
		}
	}
}

func TestMountNFSOfMissingExportFails(t *testing.T) {
	f := newFixture(t)
	out, err := f.ns.Run("mount", "-t", "nfs", f.srv.Spec("/missing"), f.dir, "-o", f.srv.MountOptions())
	checkRefused(t, f, "/missing", out, err)
	if !strings.Contains(out, "NFS3ERR_NOENT") {
		t.Errorf("failure does not say the export is missing: %q", out)
	}
}

func TestMountNFSOfStoppedServerGivesUpAfterRetry(t *testing.T) {
	f := newFixture(t)
	f.srv.Stop()
	opts := f.srv.MountOptions("retry=0", "soft", "timeo=5", "retrans=0") // 0.5 s
	took, err := within(t, 30*time.Second, "mount of a stopped server", func() error {
		out, err := f.ns.Run("mount", "-t", "nfs", f.srv.Spec("/"), f.dir, "-o", opts)
		checkRefused(t, f, "a stopped server", out, err)
		return nil
	})
	t.Logf("mount gave up after %v (%v)", took, err)
}

// checkRefused checks that a mount failed as mount.nfs fails (exit code
// 32) and left nothing mounted or running.
func checkRefused(t *testing.T, f *fixture, what, out string, err error) {
	t.Helper()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 32 {
		t.Errorf("mount with %s: %v (%q), want exit code 32", what, err, out)
	}
	if f.mounted(t) {
		t.Fatalf("mount with %s left %s mounted", what, f.dir)
	}
	if p := f.ns.Processes(); len(p) > 0 {
		t.Errorf("mount with %s left processes %v", what, p)
	}
}

func readHostMountinfo(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func appendFile(t *testing.T, path, content string) {
	t.Helper()
	fd, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fd.WriteString(content); err != nil {
		t.Fatal(err)
	}
	must(t, fd.Close())
}

func checkMode(t *testing.T, path string, want os.FileMode) {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode() != want {
		t.Errorf("server's %s has mode %v, want %v", filepath.Base(path), st.Mode(), want)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
