package hostpath_test

import (
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/plugins/hostpath"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
)

// hostRoot is a host root H inside a scratch directory P, where the agent's
// own view of P stands for the agent's container: an absolute symlink in H
// resolved in the agent's view lands in P, outside H.
type hostRoot struct {
	scratch, root string
	// devices is true if out holds a character (null) and a block (blk)
	// device; creating them needs CAP_MKNOD.
	devices bool
	// out is an absolute path (P/out) that exists in both views: H+out is
	// the host's, holding the socket, directory and file the checks expect;
	// out itself is the agent's, holding decoys of the wrong types.
	out string
}

// newHostRoot lays out:
//
//	H/var/run   -> out             absolute, into the host's H+out
//	H/var/spool -> P/spool         exists in the agent's view only
//	H/etc/rel   -> ../var/run/dir  relative, through the absolute one
//	H/a/b/up    -> ../../..        one ".." above H
//	H/slashup   -> /..
//	H/lnk       -> out/by-link     FileOrCreate must not create through it
//	H/marker                       a file; P/marker is a directory
//
// and, where it may, the devices H+out/null and H+out/blk.
func newHostRoot(t *testing.T) hostRoot {
	t.Helper()
	p := t.TempDir()
	h := hostRoot{scratch: p, root: filepath.Join(p, "host"), out: filepath.Join(p, "out")}
	hostOut := h.host(h.out)
	mkdirs(t, hostOut+"/dir", h.out+"/file", h.host("/var"), h.host("/etc"), h.host("/a/b"), p+"/spool", p+"/marker")
	plugintest.WriteFile(t, hostOut+"/file", "host data")
	plugintest.WriteFile(t, h.host("/marker"), "host root")
	plugintest.WriteFile(t, h.out+"/app.sock", "decoy")
	plugintest.WriteFile(t, h.out+"/dir", "decoy")
	if err := unix.Mknod(hostOut+"/app.sock", unix.S_IFSOCK|0o644, 0); err != nil {
		t.Fatal(err)
	}
	h.devices = unix.Mknod(hostOut+"/null", unix.S_IFCHR|0o644, int(unix.Mkdev(1, 3))) == nil &&
		unix.Mknod(hostOut+"/blk", unix.S_IFBLK|0o644, int(unix.Mkdev(7, 0))) == nil
	for link, target := range map[string]string{
		"/var/run": h.out, "/var/spool": p + "/spool", "/etc/rel": "../var/run/dir",
		"/a/b/up": "../../..", "/slashup": "/..", "/lnk": h.out + "/by-link",
	} {
		if err := os.Symlink(target, h.host(link)); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

// host returns where the host path p lies in the agent's view.
func (h hostRoot) host(p string) string { return filepath.Join(h.root, p) }

// outside describes everything in the scratch directory outside H.
func (h hostRoot) outside(t *testing.T) map[string]string {
	t.Helper()
	tree := plugintest.Tree(t, h.scratch)
	maps.DeleteFunc(tree, func(rel, _ string) bool { return rel == "host" || strings.HasPrefix(rel, "host/") })
	return tree
}

func mkdirs(t *testing.T, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSetUpResolvesInHostRoot(t *testing.T) {
	defer unix.Umask(unix.Umask(0o077))
	for _, tc := range []struct {
		name    string
		path    string // a host path; "OUT" stands for hostRoot.out
		typ     v1.HostPathType
		wantErr string
		created string // host path the check must create
		mode    os.FileMode
	}{
		{"Socket via absolute link", "/var/run/app.sock", v1.HostPathSocket, "", "", 0},
		{"Directory via absolute link", "/var/run/dir", v1.HostPathDirectory, "", "", 0},
		{"File via absolute link", "/var/run/file", v1.HostPathFile, "", "", 0},
		{"CharDevice via absolute link", "/var/run/null", v1.HostPathCharDev, "", "", 0},
		{"BlockDevice via absolute link", "/var/run/blk", v1.HostPathBlockDev, "", "", 0},
		{"BlockDevice, char device via link", "/var/run/null", v1.HostPathBlockDev, "/var/run/null is not a block device", "", 0},
		{"Directory via relative link", "/etc/rel", v1.HostPathDirectory, "", "", 0},
		{"Directory via ../../..", "/a/b/up", v1.HostPathDirectory, "", "", 0},
		{"File via ../../..", "/a/b/up/marker", v1.HostPathFile, "", "", 0},
		{"File via /..", "/slashup/marker", v1.HostPathFile, "", "", 0},
		{"DirectoryOrCreate, existing via link", "/var/run/dir", v1.HostPathDirectoryOrCreate, "", "", 0},
		{"DirectoryOrCreate via absolute link", "/var/run/new/sub", v1.HostPathDirectoryOrCreate, "", "OUT/new/sub", os.ModeDir | 0o755},
		{"DirectoryOrCreate via ../../..", "/a/b/up/made", v1.HostPathDirectoryOrCreate, "", "/made", os.ModeDir | 0o755},
		{"DirectoryOrCreate, file via link", "/var/run/file", v1.HostPathDirectoryOrCreate, "is not a directory", "", 0},
		{"DirectoryOrCreate via link dangling on the host", "/var/spool/x", v1.HostPathDirectoryOrCreate, "mkdir /var/spool: file exists", "", 0},
		{"FileOrCreate, existing via link", "/var/run/file", v1.HostPathFileOrCreate, "", "", 0},
		{"FileOrCreate via absolute link", "/var/run/created", v1.HostPathFileOrCreate, "", "OUT/created", 0o644},
		{"FileOrCreate via ../../..", "/a/b/up/created", v1.HostPathFileOrCreate, "", "/created", 0o644},
		{"FileOrCreate, directory via link", "/var/run/dir", v1.HostPathFileOrCreate, "is not a file", "", 0},
		{"FileOrCreate, final link not followed", "/lnk", v1.HostPathFileOrCreate, "open /lnk: no such file or directory", "", 0},
		{"FileOrCreate, parent missing on the host", "/var/spool/f", v1.HostPathFileOrCreate, "open /var/spool: no such file or directory", "", 0},
		{"Socket, file via link", "/var/run/file", v1.HostPathSocket, "/var/run/file is not a socket", "", 0},
		{"Directory, missing via link", "/var/run/missing", v1.HostPathDirectory, "open /var/run/missing: no such file or directory", "", 0},
	} {
		for _, mode := range checkModes {
			t.Run(mode.name+"/"+tc.name, func(t *testing.T) {
				h := newHostRoot(t)
				if (tc.typ == v1.HostPathCharDev || tc.typ == v1.HostPathBlockDev) && !h.devices {
					t.Skip("cannot create device nodes (needs CAP_MKNOD)")
				}
				outside, inside := h.outside(t), plugintest.Tree(t, h.root)
				res, err := (&hostpath.Plugin{HostRoot: h.root, Checker: mode.checker, Checkers: mode.checkers}).SetUp(context.Background(), spec(tc.path, tc.typ), "")
				checkErr(t, err, tc.wantErr, tc.path, string(tc.typ))
				if err != nil && strings.Contains(err.Error(), h.root) {
					t.Errorf("error %q names the path below the host root, not the host path", err)
				}
				if err == nil && res.Path != tc.path {
					t.Errorf("Path = %s, want the host path %s", res.Path, tc.path)
				}
				if after := h.outside(t); !maps.Equal(outside, after) {
					t.Errorf("SetUp changed files outside the host root:\nbefore %q\nafter  %q", outside, after)
				}
				if tc.created == "" {
					if after := plugintest.Tree(t, h.root); !maps.Equal(inside, after) {
						t.Errorf("SetUp changed the host:\nbefore %q\nafter  %q", inside, after)
					}
					return
				}
				created := h.host(strings.Replace(tc.created, "OUT", h.out, 1))
				if fi, err := os.Lstat(created); err != nil {
					t.Errorf("SetUp did not create %s: %v", created, err)
				} else if fi.Mode() != tc.mode {
					t.Errorf("SetUp created %s with mode %v, want %v", created, fi.Mode(), tc.mode)
				}
			})
		}
	}
}

// TestSetUpVarRun is the reported case: /var/run -> /run on the host.
func TestSetUpVarRun(t *testing.T) {
	h := t.TempDir()
	mkdirs(t, h+"/var", h+"/run/app")
	if err := os.Symlink("/run", h+"/var/run"); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(h+"/run/app/app.sock", unix.S_IFSOCK|0o644, 0); err != nil {
		t.Fatal(err)
	}
	p := &hostpath.Plugin{HostRoot: h}
	if _, err := p.SetUp(context.Background(), spec("/var/run/app/app.sock", v1.HostPathSocket), ""); err != nil {
		t.Errorf("Socket /var/run/app/app.sock: %v", err)
	}
	// Unique (TestSetUpVarRun<random>), so that a failure cannot meet an
	// existing /run entry.
	name := filepath.Base(filepath.Dir(h))
	t.Cleanup(func() { os.Remove("/run/" + name) })
	if _, err := p.SetUp(context.Background(), spec("/var/run/"+name, v1.HostPathDirectoryOrCreate), ""); err != nil {
		t.Fatalf("DirectoryOrCreate /var/run/%s: %v", name, err)
	}
	if fi, err := os.Lstat(h + "/run/" + name); err != nil || !fi.IsDir() {
		t.Errorf("DirectoryOrCreate did not create %s/run/%s: %v", h, name, err)
	}
	if _, err := os.Lstat("/run/" + name); err == nil {
		t.Errorf("DirectoryOrCreate created /run/%s outside the host root", name)
	}
}

// TestSetUpOwnRoot checks that a host root of "/" or "" resolves as the
// agent's own kernel does.
func TestSetUpOwnRoot(t *testing.T) {
	defer unix.Umask(unix.Umask(0o077))
	for _, hostRoot := range []string{"", "/"} {
		dir := t.TempDir()
		mkdirs(t, dir+"/target")
		if err := unix.Mknod(dir+"/target/sock", unix.S_IFSOCK|0o644, 0); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(dir+"/target", dir+"/link"); err != nil {
			t.Fatal(err)
		}
		p := &hostpath.Plugin{HostRoot: hostRoot}
		for _, tc := range []struct {
			path string
			typ  v1.HostPathType
		}{
			{dir + "/link/sock", v1.HostPathSocket},
			{dir + "/link/new/sub", v1.HostPathDirectoryOrCreate},
			{dir + "/link/file", v1.HostPathFileOrCreate},
			{dir + "/link/file", v1.HostPathFile},
		} {
			if _, err := p.SetUp(context.Background(), spec(tc.path, tc.typ), ""); err != nil {
				t.Errorf("HostRoot %q: %s %s: %v", hostRoot, tc.typ, tc.path, err)
			}
		}
		if fi, err := os.Stat(dir + "/target/new/sub"); err != nil || fi.Mode() != os.ModeDir|0o755 {
			t.Errorf("HostRoot %q: DirectoryOrCreate through a link did not make a 0755 directory: %v", hostRoot, err)
		}
	}
}
