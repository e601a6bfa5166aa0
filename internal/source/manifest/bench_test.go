package manifest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap"
)

// benchPod is a pod with the four volume kinds the benchmarks of issue 8
// use: a configMap, a secret, an emptyDir and a projected volume.
const benchPod = `apiVersion: v1
kind: Pod
metadata:
  name: %s
  labels: {app: bench}
spec:
  containers:
  - name: app
    image: %s
    volumeMounts:
    - {name: config, mountPath: /etc/config}
    - {name: creds, mountPath: /etc/creds}
    - {name: scratch, mountPath: /scratch}
    - {name: all, mountPath: /all}
  volumes:
  - name: config
    configMap: {name: cfg}
  - name: creds
    secret: {secretName: creds}
  - name: scratch
    emptyDir: {}
  - name: all
    projected:
      sources:
      - configMap: {name: cfg}
      - downwardAPI:
          items:
          - {path: labels, fieldRef: {fieldPath: metadata.labels}}
`

const benchConfigMap = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata:\n  value: %q\n"

// benchDir fills a directory with pods-1 pod files and one ConfigMap file,
// all written long enough ago to count at start.
func benchDir(b *testing.B, files int) string {
	b.Helper()
	dir := b.TempDir()
	for i := range files - 1 {
		name := fmt.Sprintf("pod-%04d", i)
		writeBenchFile(b, dir, name+".yaml", fmt.Sprintf(benchPod, name, "v0"))
	}
	writeBenchFile(b, dir, "cfg.yaml", fmt.Sprintf(benchConfigMap, "v0"))
	return dir
}

func writeBenchFile(b *testing.B, dir, name, content string) {
	b.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		b.Fatal(err)
	}
	old := time.Now().Add(-10 * settleDelay)
	if err := os.Chtimes(path, old, old); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRenameToPublish measures the time from rename(2) of a complete
// manifest into the directory (the way editors, kubectl-style tools and
// the examples write) to the source publishing its new content, with 1 and
// 1,000 files in the directory. It reports the median and the 99th
// percentile as ms-p50 and ms-p99.
func BenchmarkRenameToPublish(b *testing.B) {
	for _, files := range []int{1, 1000} {
		b.Run(fmt.Sprintf("configmap/files=%d", files), func(b *testing.B) {
			benchRename(b, files, "cfg.yaml", func(i int) string { return fmt.Sprintf(benchConfigMap, fmt.Sprint(i)) },
				func(s *Source, i int) bool {
					cm, err := s.Objects().ConfigMap("default", "cfg")
					return err == nil && cm.Data["value"] == fmt.Sprint(i)
				})
		})
		if files == 1 {
			continue // a directory of one pod file has no ConfigMap to resolve
		}
		b.Run(fmt.Sprintf("pod/files=%d", files), func(b *testing.B) {
			benchRename(b, files, "pod-0000.yaml", func(i int) string { return fmt.Sprintf(benchPod, "pod-0000", fmt.Sprint("v", i)) },
				func(s *Source, i int) bool {
					p := s.Pods()[0]
					return p.Name == "pod-0000" && p.Spec.Containers[0].Image == fmt.Sprint("v", i)
				})
		})
	}
}

// benchRename renames content(i) over file in a running source's directory
// b.N times, and times each rename until published(i) holds.
func benchRename(b *testing.B, files int, file string, content func(int) string, published func(*Source, int) bool) {
	dir := benchDir(b, files)
	changed := make(chan struct{}, 1)
	src := runBench(b, dir, func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	})
	tmp := filepath.Join(dir, "."+file+".tmp")
	took := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 1; i <= b.N; i++ {
		if err := os.WriteFile(tmp, []byte(content(i)), 0o644); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := os.Rename(tmp, filepath.Join(dir, file)); err != nil {
			b.Fatal(err)
		}
		for !published(src, i) {
			select {
			case <-changed:
			case <-time.After(5 * time.Second):
				b.Fatalf("rename %d not published within 5s", i)
			}
		}
		took = append(took, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(took)
	b.ReportMetric(ms(took[len(took)/2]), "ms-p50")
	b.ReportMetric(ms(took[len(took)*99/100]), "ms-p99")
}

// BenchmarkRenameBurst renames 1,000 pod manifests into an empty directory
// as fast as one writer can, and measures the time from the first rename
// until the source publishes all of them (ms-all), and the CPU time the
// process spent meanwhile (cpu-ms), most of it the source's.
func BenchmarkRenameBurst(b *testing.B) {
	const pods = 1000
	for range b.N {
		b.StopTimer()
		dir := b.TempDir()
		for i := range pods {
			name := fmt.Sprintf("pod-%04d", i)
			writeBenchFile(b, dir, "."+name+".tmp", fmt.Sprintf(benchPod, name, "v0"))
		}
		src := runBench(b, dir, nil)
		b.StartTimer()
		cpu0, start := cpuTime(), time.Now()
		for i := range pods {
			name := fmt.Sprintf("pod-%04d", i)
			if err := os.Rename(filepath.Join(dir, "."+name+".tmp"), filepath.Join(dir, name+".yaml")); err != nil {
				b.Fatal(err)
			}
		}
		for len(src.Pods()) < pods {
			if time.Since(start) > 30*time.Second {
				b.Fatalf("%d of %d pods published after 30s", len(src.Pods()), pods)
			}
			time.Sleep(100 * time.Microsecond)
		}
		b.StopTimer()
		b.ReportMetric(ms(time.Since(start)), "ms-all")
		b.ReportMetric(ms(cpuTime()-cpu0), "cpu-ms")
	}
}

// runBench runs a source on dir until the benchmark ends, and waits for
// its first scan.
func runBench(b *testing.B, dir string, onChange func()) *Source {
	b.Helper()
	src, err := New(Config{Dir: dir, NodeName: "node-1", Logger: zap.NewNop(), Resync: time.Hour, OnChange: onChange})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	})
	for src.Status().Reason == "initial scan not done" {
		time.Sleep(time.Millisecond)
	}
	return src
}

// cpuTime returns the user and system CPU time of the process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// benchScanner returns a scanner that has read a directory of 1,000 files.
func benchScanner(b *testing.B) (*scanner, string) {
	dir := benchDir(b, 1000)
	sc := newScanner(dir, "node-1", zap.NewNop())
	sc.scan()
	b.ReportAllocs()
	b.ResetTimer()
	return sc, dir
}

// BenchmarkRescan measures one scan of a directory of 1,000 files, none of
// which changed: what every event cost before events named what to read.
func BenchmarkRescan(b *testing.B) {
	sc, _ := benchScanner(b)
	for range b.N {
		sc.scan()
	}
}

// BenchmarkReread measures what a manifest renamed into a directory of
// 1,000 files costs: reading that file again and merging the result.
func BenchmarkReread(b *testing.B) {
	sc, dir := benchScanner(b)
	for i := range b.N {
		b.StopTimer()
		writeBenchFile(b, dir, "cfg.yaml", fmt.Sprintf(benchConfigMap, fmt.Sprint(i)))
		b.StartTimer()
		sc.reread([]string{"cfg.yaml"})
	}
}

// BenchmarkParsePod measures parsing one pod file: decoding, checks,
// normalizing and the content version.
func BenchmarkParsePod(b *testing.B) {
	raw := []byte(fmt.Sprintf(benchPod, "web", "v1"))
	p := newParser("node-1")
	b.ReportAllocs()
	cpu0 := cpuTime()
	for range b.N {
		if _, problems := p.parseFile("web.yaml", raw); len(problems) > 0 {
			b.Fatal(problems)
		}
	}
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N)/1e3, "cpu-µs/op")
}

// BenchmarkResult measures what every batch of events costs beyond reading
// the files it names: merging all files, logging what changed and indexing
// the snapshot (scanner.result), with 330 files (110 pods with their own
// ConfigMap and Secret) and 1,000.
func BenchmarkResult(b *testing.B) {
	for _, files := range []int{330, 1000} {
		b.Run(fmt.Sprintf("files=%d", files), func(b *testing.B) {
			sc := newScanner(benchDir(b, files), "node-1", zap.NewNop())
			sc.scan()
			b.ReportAllocs()
			cpu0, n := cpuTime(), 0
			for b.Loop() {
				sc.result()
				n++
			}
			// The process's CPU time, which a loaded machine does not
			// stretch as it stretches ns/op.
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(n)/1e3, "cpu-µs/op")
		})
	}
}

// BenchmarkResultEdit measures scanner.result for a batch of one pod file
// edited (its image changed, nothing dropped), with 330 and 1,000 files:
// the merge, logging and snapshot a burst's batch of one file costs. The
// file's read and parse, done before, are not measured; cpu-µs/op is the
// process's CPU time during result alone.
func BenchmarkResultEdit(b *testing.B) {
	for _, files := range []int{330, 1000} {
		b.Run(fmt.Sprintf("files=%d", files), func(b *testing.B) {
			dir := benchDir(b, files)
			sc := newScanner(dir, "node-1", zap.NewNop())
			sc.scan()
			b.ReportAllocs()
			var cpu time.Duration
			n := 0
			for b.Loop() {
				b.StopTimer()
				writeBenchFile(b, dir, "pod-0005.yaml", fmt.Sprintf(benchPod, "pod-0005", fmt.Sprint("v", n+1)))
				sc.update([]string{"pod-0005.yaml"})
				b.StartTimer()
				cpu0 := cpuTime()
				sc.result()
				cpu += cpuTime() - cpu0
				n++
			}
			b.ReportMetric(float64(cpu)/float64(n)/1e3, "cpu-µs/op")
		})
	}
}
