package nfstest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

var helper string // the mount.nfs helper, built by TestMain

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "nfstest-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if helper, err = BuildMountHelper(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goroutines left behind: %v\n", err)
			return 1
		}
	}
	return code
}

// fixture is an export of a host directory and a mount point, with a
// namespace to mount it in.
type fixture struct {
	ns     *Namespace
	srv    *Server
	export string // the server's directory on the host
	dir    string // the mount point, the same path inside the namespace
}

func newFixture(t *testing.T, opts ...Option) *fixture {
	t.Helper()
	// The directories come first, so that they are removed only once
	// the namespace has ended and the server has stopped.
	f := &fixture{export: t.TempDir(), dir: t.TempDir()}
	f.ns = NewNamespace(t, helper)
	f.srv = Start(t, f.export, opts...)
	return f
}

// mount runs `mount -t nfs SPEC DIR -o OPTS` inside the namespace.
func (f *fixture) mount(t *testing.T, extra ...string) {
	t.Helper()
	if out, err := f.ns.Run("mount", "-t", "nfs", f.srv.Spec("/"), f.dir, "-o", f.srv.MountOptions(extra...)); err != nil {
		t.Fatalf("mount -t nfs %s %s: %v\n%s", f.srv.Spec("/"), f.dir, err, out)
	}
}

// path is where the test process finds name of the mounted export.
func (f *fixture) path(name string) string { return f.ns.Path(f.dir + "/" + name) }

// mounted reports whether the namespace has a mount on the mount point.
func (f *fixture) mounted(t *testing.T) bool {
	t.Helper()
	_, ok := f.ns.Mount(f.dir)
	return ok
}

// waitNoHelper waits until no helper process is left in the namespace.
func (f *fixture) waitNoHelper(t *testing.T, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for len(f.ns.Processes()) > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("helper processes %v still running %v after the unmount", f.ns.Processes(), timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// within runs op in a goroutine and returns its error, failing the test
// if it takes longer than limit: a file system call that hangs must not
// hang the test.
func within(t *testing.T, limit time.Duration, what string, op func() error) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- op() }()
	select {
	case err := <-done:
		return time.Since(start), err
	case <-time.After(limit):
		t.Fatalf("%s still running after %v", what, limit)
		return 0, nil
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
