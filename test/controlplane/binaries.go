package controlplane

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// CacheEnv names the environment variable that overrides the cache root.
const CacheEnv = "VOLUME_AGENT_TEST_CACHE"

// buildFlags are passed to every `go build`. CGO_ENABLED=0 (set in the
// environment) needs no C toolchain on a clean machine and matches how
// Kubernetes ships its server binaries; -trimpath and -s -w only make the
// binaries smaller and the link faster. They are part of the cache key.
var buildFlags = []string{"-trimpath", "-buildvcs=false", "-ldflags=-s -w"}

// binary is one executable built from a helper module.
type binary struct {
	name   string // file name in the cache directory
	module string // helper module directory, relative to this package
	pkg    string // main package to build
}

var (
	etcdBinary              = binary{"etcd", "etcd", "go.etcd.io/etcd/server/v3"}
	apiserverBinary         = binary{"kube-apiserver", "kube", "k8s.io/kubernetes/cmd/kube-apiserver"}
	controllerManagerBinary = binary{"kube-controller-manager", "kube", "k8s.io/kubernetes/cmd/kube-controller-manager"}
	schedulerBinary         = binary{"kube-scheduler", "kube", "k8s.io/kubernetes/cmd/kube-scheduler"}
	kubeletBinary           = binary{"kubelet", "kube", "k8s.io/kubernetes/cmd/kubelet"}
)

// helperModules are hashed, in this order, into the cache key.
var helperModules = []string{"etcd", "kube"}

// Binaries makes sure etcd and kube-apiserver are built and returns the
// cache directory that holds them. Start builds kube-controller-manager and
// kube-scheduler into the same directory when its Options ask for them.
func Binaries(t testing.TB) (dir string) {
	t.Helper()
	return ensureBinaries(t, t.Logf, etcdBinary, apiserverBinary)
}

// Kubelet makes sure the kubelet (of the same Kubernetes version as
// kube-apiserver) is built, only when a test asks for it, and returns its
// path.
func Kubelet(t testing.TB) string {
	t.Helper()
	return filepath.Join(ensureBinaries(t, t.Logf, kubeletBinary), kubeletBinary.name)
}

// ensureBinaries returns the cache directory after making sure every wanted
// binary is in it. A warm cache costs a few stat calls: no lock, no go command.
func ensureBinaries(t testing.TB, logf func(string, ...any), want ...binary) string {
	t.Helper()
	src, err := sourceDir()
	if err != nil {
		t.Fatalf("controlplane: %v", err)
	}
	dir, err := cacheDir(src)
	if err != nil {
		t.Fatalf("controlplane: %v", err)
	}
	if len(missing(dir, want)) == 0 {
		return dir
	}
	ctx, cancel := buildContext(t)
	defer cancel()
	if err := buildLocked(ctx, dir, src, want, logf); err != nil {
		if ctx.Err() != nil {
			t.Fatalf("controlplane: %v\nthe binaries were not built before the test deadline; "+
				"a cold build takes about 10 minutes on 2 cores: run go test with -timeout 30m "+
				"(the Go build cache keeps what was compiled so far)", err)
		}
		t.Fatalf("controlplane: %v", err)
	}
	return dir
}

// buildContext ends shortly before the test's deadline, so that a build
// that cannot finish in time fails with a clear message instead of the
// test binary panicking in the middle of it.
func buildContext(t testing.TB) (context.Context, context.CancelFunc) {
	deadline, ok := deadlineOf(t)
	if !ok {
		return context.WithCancel(context.Background())
	}
	return context.WithDeadline(context.Background(), deadline.Add(-buildDeadlineMargin))
}

// buildDeadlineMargin is left before the test deadline to report a build
// that did not finish.
const buildDeadlineMargin = 30 * time.Second

// deadlineOf returns t's deadline, which only *testing.T has.
func deadlineOf(t testing.TB) (time.Time, bool) {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		return d.Deadline()
	}
	return time.Time{}, false
}

// missing returns the wanted binaries that are not in dir yet. A binary is
// renamed into dir only once it is complete, so existing means usable.
func missing(dir string, want []binary) []binary {
	var out []binary
	for _, b := range want {
		if fi, err := os.Stat(filepath.Join(dir, b.name)); err != nil || !fi.Mode().IsRegular() {
			out = append(out, b)
		}
	}
	return out
}

// buildLocked builds the missing binaries while holding an exclusive flock
// on dir+".lock": `go test ./...` runs packages in parallel, and several may
// want the binaries at once. Whoever gets the lock second finds them built.
func buildLocked(ctx context.Context, dir, src string, want []binary, logf func(string, ...any)) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create binary cache %s: %w", dir, err)
	}
	lock, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fmt.Errorf("open build lock: %w", err)
	}
	defer lock.Close() // closing the file releases the flock
	if err := flock(ctx, lock, logf); err != nil {
		return fmt.Errorf("lock %s: %w", lock.Name(), err)
	}
	todo := missing(dir, want)
	if len(todo) == 0 {
		return nil
	}
	// Build directories left by a builder that died are named after the
	// key and so belong to this lock, which nobody else holds now.
	stale, _ := filepath.Glob(dir + ".build-*")
	for _, d := range stale {
		os.RemoveAll(d)
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), filepath.Base(dir)+".build-")
	if err != nil {
		return fmt.Errorf("create build directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	for _, group := range byModule(todo) {
		if err := build(ctx, tmp, filepath.Join(src, group[0].module), group, logf); err != nil {
			return err
		}
	}
	for _, b := range todo {
		if err := os.Rename(filepath.Join(tmp, b.name), filepath.Join(dir, b.name)); err != nil {
			return fmt.Errorf("move %s into the cache: %w", b.name, err)
		}
	}
	return nil
}

// flock takes an exclusive lock on f, saying so when it has to wait. It
// polls rather than blocks so that it gives up when ctx ends.
func flock(ctx context.Context, f *os.File, logf func(string, ...any)) error {
	ticker := time.NewTicker(lockPollInterval)
	defer ticker.Stop()
	for logged := false; ; logged = true {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return err
		}
		if !logged {
			logf("controlplane: waiting for another test process to finish building the binaries")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
}

// lockPollInterval is how often a waiting test retries the build lock; the
// build it waits for takes minutes.
const lockPollInterval = time.Second

// byModule groups binaries by helper module, keeping their order, so each
// module is built with one `go build` that compiles shared packages once.
func byModule(bins []binary) [][]binary {
	var groups [][]binary
	index := map[string]int{}
	for _, b := range bins {
		i, ok := index[b.module]
		if !ok {
			i = len(groups)
			index[b.module] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], b)
	}
	return groups
}

// build runs `go build` in moduleDir for the binaries of one module, writing
// them into out. On failure the error carries the tail of the go command's
// output.
func build(ctx context.Context, out, moduleDir string, bins []binary, logf func(string, ...any)) error {
	args := append([]string{"build"}, buildFlags...)
	target := filepath.Join(out, bins[0].name)
	if len(bins) > 1 {
		target = out + string(filepath.Separator) // go build names each binary after its package
	}
	args = append(args, "-o", target)
	var names []string
	for _, b := range bins {
		args = append(args, b.pkg)
		names = append(names, b.name)
	}
	logf("controlplane: building %s in %s (cold builds take minutes)", strings.Join(names, ", "), moduleDir)
	start := time.Now()
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = moduleDir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off")
	// The go command runs the compiler and linker as children: kill the
	// whole group when ctx ends. If the test binary dies, Pdeathsig kills
	// the go command and its children finish their current step and exit.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	output, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go %s in %s: %w\n%s", strings.Join(args, " "), moduleDir, err, tail(output, 40))
	}
	logf("controlplane: built %s in %s", strings.Join(names, ", "), time.Since(start).Round(time.Second))
	return nil
}

// cacheDir returns the cache directory for the current helper modules:
// $VOLUME_AGENT_TEST_CACHE (or $HOME/.cache/volume-agent-test) followed by a
// hash of the helper modules' go.mod and go.sum files, the build flags and
// the target platform.
func cacheDir(src string) (string, error) {
	root := os.Getenv(CacheEnv)
	if root == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("find the binary cache: set $%s: %w", CacheEnv, err)
		}
		root = filepath.Join(home, ".cache", "volume-agent-test")
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s/%s %q\n", runtime.GOOS, runtime.GOARCH, buildFlags)
	for _, m := range helperModules {
		for _, f := range []string{"go.mod", "go.sum"} {
			data, err := os.ReadFile(filepath.Join(src, m, f))
			if err != nil {
				return "", fmt.Errorf("hash helper module: %w", err)
			}
			fmt.Fprintf(h, "%s/%s %d\n", m, f, len(data))
			h.Write(data)
		}
	}
	return filepath.Join(root, hex.EncodeToString(h.Sum(nil))[:16]), nil
}

// sourceDir returns the directory of this package's source, which holds the
// helper modules. It trusts the compiled-in file name when that exists
// (plain `go test`) and otherwise walks up from the working directory, which
// `go test` sets to a package directory inside the main module.
func sourceDir() (string, error) {
	const rel = "test/controlplane"
	if _, file, _, ok := runtime.Caller(0); ok {
		dir := filepath.Dir(file)
		if _, err := os.Stat(filepath.Join(dir, "kube", "go.mod")); err == nil {
			return dir, nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find helper modules: %w", err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		cand := filepath.Join(dir, filepath.FromSlash(rel))
		if _, err := os.Stat(filepath.Join(cand, "kube", "go.mod")); err == nil {
			return cand, nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("find helper modules: no %s/kube/go.mod above %s", rel, wd)
		}
	}
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}
