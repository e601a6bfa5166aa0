package hostpath_test

import (
	"context"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/plugins/hostpath"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
	"github.com/volume-agent/volume-agent/internal/volume"
)

func spec(path string, typ v1.HostPathType) *volume.Spec {
	return &volume.Spec{
		Pod:    &v1.Pod{},
		Volume: &v1.Volume{Name: "host", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: path, Type: &typ}}},
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		path    string
		typ     v1.HostPathType
		wantErr string
	}{
		{"/var/data", v1.HostPathUnset, ""},
		{"/var/..data/x", v1.HostPathDirectoryOrCreate, ""},
		{"/dev/null", v1.HostPathCharDev, ""},
		{"var/data", v1.HostPathDirectory, "must be absolute"},
		{"", v1.HostPathUnset, "must be absolute"},
		{"/var/../etc", v1.HostPathDirectory, "'..'"},
		{"/var/data/..", v1.HostPathDirectory, "'..'"},
		{"/var/data", "Dir", `"Dir" is not a known type`},
		{"/var/data", "directory", `"directory" is not a known type`},
	} {
		err := (&hostpath.Plugin{}).Validate(spec(tc.path, tc.typ))
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("Validate(%q, %q) = %v, want error containing %q", tc.path, tc.typ, err, tc.wantErr)
		}
	}
	for _, typ := range []v1.HostPathType{v1.HostPathUnset, v1.HostPathDirectoryOrCreate, v1.HostPathDirectory, v1.HostPathFileOrCreate,
		v1.HostPathFile, v1.HostPathSocket, v1.HostPathCharDev, v1.HostPathBlockDev} {
		if err := (&hostpath.Plugin{}).Validate(spec("/x", typ)); err != nil {
			t.Errorf("Validate(type %q) = %v, want nil", typ, err)
		}
	}
}

// fixture is a temporary directory holding a directory, a file and a socket.
type fixture struct{ dir, file, socket string }

func newFixture(t *testing.T) fixture {
	t.Helper()
	f := fixture{dir: t.TempDir()}
	f.file, f.socket = filepath.Join(f.dir, "file"), filepath.Join(f.dir, "sock")
	plugintest.WriteFile(t, f.file, "host data")
	l, err := net.Listen("unix", f.socket)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return f
}

func TestSetUpTypes(t *testing.T) {
	// Modes of created paths must not depend on the umask.
	defer unix.Umask(unix.Umask(0o077))
	fx := newFixture(t)
	missing := filepath.Join(fx.dir, "missing")
	for _, tc := range []struct {
		name    string
		path    string
		typ     v1.HostPathType
		wantErr string // "" for success
	}{
		{"unset, missing", missing, v1.HostPathUnset, ""},
		{"unset, file", fx.file, v1.HostPathUnset, ""},
		{"Directory", fx.dir, v1.HostPathDirectory, ""},
		{"Directory, missing", missing, v1.HostPathDirectory, "no such file or directory"},
		{"Directory, file", fx.file, v1.HostPathDirectory, "is not a directory"},
		{"DirectoryOrCreate, existing", fx.dir, v1.HostPathDirectoryOrCreate, ""},
		{"DirectoryOrCreate, file", fx.file, v1.HostPathDirectoryOrCreate, "is not a directory"},
		{"File", fx.file, v1.HostPathFile, ""},
		{"File, directory", fx.dir, v1.HostPathFile, "is not a file"},
		{"File, socket", fx.socket, v1.HostPathFile, "is not a file"},
		{"File, missing", missing, v1.HostPathFile, "no such file or directory"},
		{"FileOrCreate, existing", fx.file, v1.HostPathFileOrCreate, ""},
		{"FileOrCreate, directory", fx.dir, v1.HostPathFileOrCreate, "is not a file"},
		{"FileOrCreate, missing parent", filepath.Join(missing, "file"), v1.HostPathFileOrCreate, "no such file or directory"},
		{"Socket", fx.socket, v1.HostPathSocket, ""},
		{"Socket, file", fx.file, v1.HostPathSocket, "is not a socket"},
		{"CharDevice", "/dev/null", v1.HostPathCharDev, ""},
		{"CharDevice, file", fx.file, v1.HostPathCharDev, "is not a character device"},
		{"BlockDevice, char device", "/dev/null", v1.HostPathBlockDev, "is not a block device"},
		{"BlockDevice, directory", fx.dir, v1.HostPathBlockDev, "is not a block device"},
	} {
		for _, mode := range checkModes {
			t.Run(mode.name+"/"+tc.name, func(t *testing.T) {
				before := plugintest.Tree(t, fx.dir)
				res, err := (&hostpath.Plugin{Checker: mode.checker, Checkers: mode.checkers}).SetUp(context.Background(), spec(tc.path, tc.typ), t.TempDir())
				checkErr(t, err, tc.wantErr, tc.path, string(tc.typ))
				if err == nil && res.Path != tc.path {
					t.Errorf("Path = %s, want the host path %s", res.Path, tc.path)
				}
				if after := plugintest.Tree(t, fx.dir); !maps.Equal(before, after) {
					t.Errorf("SetUp changed the host:\nbefore %q\nafter  %q", before, after)
				}
			})
		}
	}
}

func checkErr(t *testing.T, err error, want string, mention ...string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("SetUp: %v", err)
		}
		return
	}
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("SetUp = %v, want an error containing %q", err, want)
	}
	for _, m := range mention {
		if m != "" && !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %q", err, m)
		}
	}
}

func TestSetUpCreates(t *testing.T) {
	defer unix.Umask(unix.Umask(0o077))
	for _, tc := range []struct {
		typ      v1.HostPathType
		rel      string
		wantMode os.FileMode
	}{
		{v1.HostPathDirectoryOrCreate, "a/b/c", os.ModeDir | 0o755},
		{v1.HostPathFileOrCreate, "file", 0o644},
	} {
		root := t.TempDir()
		path := filepath.Join(root, tc.rel)
		for range 2 { // the second SetUp finds what the first created
			if _, err := (&hostpath.Plugin{}).SetUp(context.Background(), spec(path, tc.typ), ""); err != nil {
				t.Fatalf("%s: %v", tc.typ, err)
			}
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode() != tc.wantMode {
				t.Fatalf("%s created %s with mode %v, want %v", tc.typ, path, fi.Mode(), tc.wantMode)
			}
		}
		if fi, err := os.Stat(filepath.Join(root, "a", "b")); tc.typ == v1.HostPathDirectoryOrCreate && (err != nil || !fi.IsDir()) {
			t.Errorf("DirectoryOrCreate did not create the parents: %v", err)
		}
		if tc.typ == v1.HostPathFileOrCreate && plugintest.ReadFile(t, path) != "" {
			t.Errorf("FileOrCreate created a file that is not empty")
		}
	}
}

func TestSetUpBlockDevice(t *testing.T) {
	dev := blockDevice(t)
	if _, err := (&hostpath.Plugin{}).SetUp(context.Background(), spec(dev, v1.HostPathBlockDev), ""); err != nil {
		t.Fatalf("SetUp(BlockDevice %s): %v", dev, err)
	}
	_, err := (&hostpath.Plugin{}).SetUp(context.Background(), spec(dev, v1.HostPathCharDev), "")
	checkErr(t, err, "is not a character device", dev)
}

// blockDevice returns a loop device node, or skips t.
func blockDevice(t *testing.T) string {
	matches, _ := filepath.Glob("/dev/loop[0-9]*")
	for _, m := range matches {
		if fi, err := os.Stat(m); err == nil && fi.Mode().Type() == os.ModeDevice {
			return m
		}
	}
	t.Skip("no loop block device in /dev")
	return ""
}

func TestTearDownLeavesHostPath(t *testing.T) {
	fx := newFixture(t)
	p := &hostpath.Plugin{}
	res, err := p.SetUp(context.Background(), spec(fx.dir, v1.HostPathDirectory), "")
	if err != nil {
		t.Fatal(err)
	}
	before := plugintest.Tree(t, fx.dir)
	// Even given the host path itself as its directory, TearDown keeps it.
	for _, dir := range []string{filepath.Join(t.TempDir(), "vol"), res.Path} {
		if err := p.TearDown(context.Background(), dir); err != nil {
			t.Fatalf("TearDown(%s): %v", dir, err)
		}
	}
	if after := plugintest.Tree(t, fx.dir); !maps.Equal(before, after) {
		t.Fatalf("TearDown changed the host path:\nbefore %q\nafter  %q", before, after)
	}
}

func TestSetUpBelowHostRoot(t *testing.T) {
	hostRoot := t.TempDir()
	p := &hostpath.Plugin{HostRoot: hostRoot}
	res, err := p.SetUp(context.Background(), spec("/var/log/app", v1.HostPathDirectoryOrCreate), "")
	if err != nil {
		t.Fatal(err)
	}
	if res.Path != "/var/log/app" {
		t.Errorf("Path = %q, want the host path /var/log/app", res.Path)
	}
	if fi, err := os.Stat(filepath.Join(hostRoot, "var/log/app")); err != nil || !fi.IsDir() {
		t.Errorf("directory not created below the host root: %v", err)
	}
}
