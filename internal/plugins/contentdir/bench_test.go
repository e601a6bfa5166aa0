package contentdir_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/mount"
	"github.com/volume-agent/volume-agent/internal/plugins/contentdir"
	"github.com/volume-agent/volume-agent/internal/plugins/plugintest"
)

// BenchmarkTmpfsVolumes sets up and tears down secret-like volumes (a tmpfs
// with two files) one after the other, as root, and reports the cost per
// volume of each half: wall time, and CPU time of the process and of the
// processes it started (mount(8) and umount(8), where used), which the
// load of a shared machine disturbs far less.
//
//	go test -run '^$' -bench TmpfsVolumes -benchtime 3x ./internal/plugins/contentdir
func BenchmarkTmpfsVolumes(b *testing.B) {
	for _, n := range []int{110, 1000} {
		b.Run(fmt.Sprintf("volumes=%d", n), func(b *testing.B) { benchTmpfsVolumes(b, n) })
	}
}

// unrelatedMounts is how many bind mounts BenchmarkTmpfsVolumesAmongMounts
// adds to the mount table.
const unrelatedMounts = 10_000

// BenchmarkTmpfsVolumesAmongMounts is BenchmarkTmpfsVolumes with 10,000
// unrelated bind mounts in the mount table, to show whether the cost of a
// volume grows with the node's mounts. The mounts are made in a private
// mount namespace of a child process (this benchmark runs itself again
// under unshare(1)), so the machine's mount table never changes.
func BenchmarkTmpfsVolumesAmongMounts(b *testing.B) {
	if !inPrivateMountNamespace(b) {
		runInPrivateMountNamespace(b)
		return
	}
	bindMounts(b, unrelatedMounts)
	for _, n := range []int{110, 1000} {
		b.Run(fmt.Sprintf("volumes=%d", n), func(b *testing.B) { benchTmpfsVolumes(b, n) })
	}
}

func benchTmpfsVolumes(b *testing.B, n int) {
	plugintest.NeedRoot(b, "mounts tmpfs")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	d := contentdir.Dir{Mounter: mount.System{}, Memory: true}
	root := b.TempDir()
	b.Cleanup(func() { plugintest.UnmountAll(b, root) })
	payload := contentdir.Payload{
		"username": {Data: []byte("admin"), Mode: 0o644},
		"password": {Data: []byte("s3cr3t"), Mode: 0o644},
	}
	var setUp, tearDown, setUpCPU, tearDownCPU time.Duration
	for i := 0; b.Loop(); i++ {
		dirs := make([]string, n)
		start, startCPU := time.Now(), cpuTime(b)
		for j := range dirs {
			dirs[j] = filepath.Join(root, "pods", fmt.Sprintf("%d-%d", i, j), "volumes", "kubernetes.io~secret", "s")
			if _, err := d.SetUp(ctx, dirs[j], payload); err != nil {
				b.Fatal(err)
			}
		}
		mid, midCPU := time.Now(), cpuTime(b)
		for _, dir := range dirs {
			if err := d.TearDown(ctx, dir); err != nil {
				b.Fatal(err)
			}
		}
		setUp, tearDown = setUp+mid.Sub(start), tearDown+time.Since(mid)
		setUpCPU, tearDownCPU = setUpCPU+midCPU-startCPU, tearDownCPU+cpuTime(b)-midCPU
	}
	per := float64(b.N * n)
	b.ReportMetric(float64(setUp.Nanoseconds())/per, "setup-ns/vol")
	b.ReportMetric(float64(tearDown.Nanoseconds())/per, "teardown-ns/vol")
	b.ReportMetric(float64(setUpCPU.Nanoseconds())/per, "setup-cpu-ns/vol")
	b.ReportMetric(float64(tearDownCPU.Nanoseconds())/per, "teardown-cpu-ns/vol")
}

// cpuTime is the user and system time of this process and of its children
// that have ended.
func cpuTime(b *testing.B) time.Duration {
	var total time.Duration
	for _, who := range []int{unix.RUSAGE_SELF, unix.RUSAGE_CHILDREN} {
		var ru unix.Rusage
		if err := unix.Getrusage(who, &ru); err != nil {
			b.Fatal(err)
		}
		total += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return total
}

// nsEnv carries the parent's mount namespace to the child benchmark, which
// runs only when its own namespace is another one.
const nsEnv = "VOLUME_AGENT_BENCH_PARENT_MNT_NS"

func mountNamespace(b *testing.B) string {
	ns, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		b.Fatal(err)
	}
	return ns
}

// inPrivateMountNamespace reports whether this process is the child started
// by runInPrivateMountNamespace, in a mount namespace of its own.
func inPrivateMountNamespace(b *testing.B) bool {
	parent := os.Getenv(nsEnv)
	return parent != "" && parent != mountNamespace(b)
}

// runInPrivateMountNamespace runs the benchmark b again in a child test
// process under `unshare -m --propagation private`, with the same
// -benchtime (and -cpuprofile, suffixed ".ns"); the child's results are
// printed as they come.
func runInPrivateMountNamespace(b *testing.B) {
	plugintest.NeedRoot(b, "makes a mount namespace")
	args := []string{"-m", "--propagation", "private", os.Args[0],
		"-test.run=^$", "-test.bench=^" + b.Name() + "$", "-test.count=1",
		"-test.benchtime=" + flag.Lookup("test.benchtime").Value.String()}
	if p := flag.Lookup("test.cpuprofile").Value.String(); p != "" {
		args = append(args, "-test.cpuprofile="+p+".ns")
	}
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(os.Environ(), nsEnv+"="+mountNamespace(b))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("benchmark in a private mount namespace: %v", err)
	}
	b.Skip("ran in a private mount namespace: its results are above")
}

// bindMounts bind-mounts a directory n times below a temporary directory.
// Only ever called in a private mount namespace.
func bindMounts(b *testing.B, n int) {
	dir := b.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		b.Fatal(err)
	}
	for i := range n {
		target := filepath.Join(dir, fmt.Sprint(i))
		if err := os.Mkdir(target, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := unix.Mount(src, target, "", unix.MS_BIND, ""); err != nil {
			b.Fatalf("bind mount %d: %v", i, err)
		}
		b.Cleanup(func() { _ = unix.Unmount(target, unix.MNT_DETACH) })
	}
}
