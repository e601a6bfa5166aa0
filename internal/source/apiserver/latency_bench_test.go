package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/volume-agent/volume-agent/test/controlplane"
)

// BenchmarkNewPodObjectsReady measures, against a real kube-apiserver on
// loopback, how long a new pod takes from its create call until an
// OnChange after which every ConfigMap and Secret its volumes name can be
// looked up — what the populator needs before it can set the volumes up.
// The source's client has the agent's default limits (50 QPS, burst 100).
//
// Each iteration creates a burst of pods at once, each with its own
// ConfigMap and Secret (created beforehand) or all sharing one pair.
// Reported per pod: seen-ms (create → the pod listed by the source) and
// ready-ms (create → its objects found), as p50 and p99 over all pods of
// all iterations.
//
//	go test -run '^$' -bench NewPodObjectsReady -benchtime 20x ./internal/source/apiserver/
func BenchmarkNewPodObjectsReady(b *testing.B) {
	cp := controlplane.Start(b, controlplane.Options{})
	for _, n := range []int{1, 50, 110} {
		for _, shared := range []bool{false, true} {
			if n == 1 && shared {
				continue
			}
			// Without direct reads every lookup waits for its watch, as
			// before they were made: the two run back to back.
			for _, reads := range []bool{false, true} {
				b.Run(fmt.Sprintf("pods=%d/shared=%v/reads=%v", n, shared, reads), func(b *testing.B) {
					benchmarkBurst(b, cp, n, shared, reads)
				})
			}
		}
	}
}

// latencyBench is one run of the source against the control plane.
type latencyBench struct {
	b      *testing.B
	admin  kubernetes.Interface
	src    *Source
	ns     string
	wake   chan struct{}
	trace  *requestTrace
	mu     sync.Mutex
	wanted map[string]*podTiming // pod name → timing, guarded by mu
}

// podTiming is what happened to one pod, as offsets from its create call.
type podTiming struct {
	start       time.Time
	cm, secret  string
	seen, ready time.Duration
	done        chan struct{}
}

func benchmarkBurst(b *testing.B, cp *controlplane.ControlPlane, n int, shared, reads bool) {
	ns := fmt.Sprintf("bench-%d-%v-%v-%d", n, shared, reads, time.Now().UnixNano()%1e6)
	cp.CreateNamespace(b, ns)
	lb := newLatencyBench(b, cp, ns, reads)
	var seen, ready []time.Duration
	waitSumBefore, waitsBefore := serverReadWait(b, lb.admin)
	b.ResetTimer()
	for i := range b.N {
		timings := lb.burst(i, n, shared)
		for _, pt := range timings {
			seen, ready = append(seen, pt.seen), append(ready, pt.ready)
		}
	}
	b.StopTimer()
	reportPercentiles(b, "seen", seen)
	reportPercentiles(b, "ready", ready)
	lb.trace.report(b)
	waitSum, waits := serverReadWait(b, lb.admin)
	if waits > waitsBefore {
		b.ReportMetric((waitSum-waitSumBefore)/(waits-waitsBefore)*1e3, "server-wait-ms")
	}
}

func newLatencyBench(b *testing.B, cp *controlplane.ControlPlane, ns string, directReads bool) *latencyBench {
	const node = "bench-node"
	// The test's own client has no rate limit, so that a burst of creates
	// is not spread out before the source sees it.
	unlimited := cp.AdminConfig()
	unlimited.QPS = -1
	admin, err := kubernetes.NewForConfig(unlimited)
	if err != nil {
		b.Fatal(err)
	}
	_, _ = admin.CoreV1().Nodes().Create(b.Context(), &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	cfg := cp.AdminConfig()
	cfg.QPS, cfg.Burst = 50, 100 // the agent's defaults
	trace := &requestTrace{}
	cfg.WrapTransport = trace.wrap
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	// Direct reads as cmd/volume-agent makes them: never waiting for a
	// limiter, made while a bucket of their own has a token.
	readsCfg := rest.CopyConfig(cfg)
	readsCfg.QPS = -1
	reads, err := kubernetes.NewForConfig(readsCfg)
	if err != nil {
		b.Fatal(err)
	}
	lb := &latencyBench{b: b, admin: admin, ns: ns, wake: make(chan struct{}, 1), trace: trace, wanted: map[string]*podTiming{}}
	var tokens Tokens = flowcontrol.NewTokenBucketPassiveRateLimiter(cfg.QPS, cfg.Burst)
	if !directReads {
		tokens = noTokens{}
	}
	lb.src, err = New(Config{Client: client, NodeName: node, Logger: zap.NewNop(), OnChange: lb.onChange, Reads: reads, ReadTokens: tokens})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = lb.src.Run(ctx) }()
	go lb.check(ctx)
	b.Cleanup(func() { cancel(); <-done })
	for !lb.src.Status().Synced {
		time.Sleep(5 * time.Millisecond)
	}
	return lb
}

func (lb *latencyBench) onChange() {
	select {
	case lb.wake <- struct{}{}:
	default:
	}
}

// check plays the populator: after every OnChange it looks up what each
// pod waited for needs.
func (lb *latencyBench) check(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-lb.wake:
		}
		now := time.Now()
		listed := map[string]bool{}
		for _, p := range lb.src.Pods() {
			listed[p.Name] = true
		}
		lb.mu.Lock()
		for name, pt := range lb.wanted {
			if !listed[name] {
				continue
			}
			if pt.seen == 0 {
				pt.seen = now.Sub(pt.start)
			}
			if lb.found(pt) {
				pt.ready = now.Sub(pt.start)
				delete(lb.wanted, name)
				close(pt.done)
			}
		}
		lb.mu.Unlock()
	}
}

func (lb *latencyBench) found(pt *podTiming) bool {
	objs := lb.src.Objects()
	_, errCM := objs.ConfigMap(lb.ns, pt.cm)
	_, errSecret := objs.Secret(lb.ns, pt.secret)
	_, errCA := objs.ConfigMap(lb.ns, controlplane.RootCAConfigMap)
	return errCM == nil && errSecret == nil && errCA == nil
}

// burst creates the objects of n pods, then the n pods at once, and waits
// until every one is ready.
func (lb *latencyBench) burst(iteration, n int, shared bool) []*podTiming {
	b, ctx := lb.b, lb.b.Context()
	b.StopTimer()
	timings := make([]*podTiming, n)
	for i := range n {
		suffix := fmt.Sprintf("%d-%d", iteration, i)
		if shared {
			suffix = fmt.Sprint(iteration)
		}
		timings[i] = &podTiming{cm: "cm-" + suffix, secret: "secret-" + suffix, done: make(chan struct{})}
		if shared && i > 0 {
			continue
		}
		if _, err := lb.admin.CoreV1().ConfigMaps(lb.ns).Create(ctx, &v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: timings[i].cm}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		if _, err := lb.admin.CoreV1().Secrets(lb.ns).Create(ctx, &v1.Secret{ObjectMeta: metav1.ObjectMeta{Name: timings[i].secret}, Data: map[string][]byte{"k": []byte("v")}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.StartTimer()
	var wg sync.WaitGroup
	for i, pt := range timings {
		name := fmt.Sprintf("pod-%d-%d", iteration, i)
		pod := &v1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: v1.PodSpec{NodeName: "bench-node", Containers: []v1.Container{{Name: "c", Image: "none"}}, Volumes: []v1.Volume{
				{Name: "cm", VolumeSource: cmVolume(pt.cm)}, {Name: "secret", VolumeSource: secretVolume(pt.secret)},
			}},
		}
		wg.Go(func() {
			lb.mu.Lock()
			pt.start = time.Now()
			lb.wanted[name] = pt
			lb.mu.Unlock()
			if _, err := lb.admin.CoreV1().Pods(lb.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				b.Error(err)
			}
		})
	}
	wg.Wait()
	for _, pt := range timings {
		select {
		case <-pt.done:
		case <-time.After(30 * time.Second):
			b.Fatalf("pod with %s and %s not ready within 30s", pt.cm, pt.secret)
		}
	}
	b.StopTimer()
	// Delete the pods so that the next burst starts from a quiet source.
	for i := range n {
		if err := lb.admin.CoreV1().Pods(lb.ns).Delete(ctx, fmt.Sprintf("pod-%d-%d", iteration, i), metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			b.Fatal(err)
		}
	}
	for len(lb.src.Pods()) > 0 {
		time.Sleep(5 * time.Millisecond)
	}
	b.StartTimer()
	return timings
}

// serverReadWait returns the sum and count of the API server's
// apiserver_watch_cache_read_wait_seconds for ConfigMaps and Secrets: how
// long reads served from its watch cache waited for the cache to catch up
// with etcd.
func serverReadWait(b *testing.B, c kubernetes.Interface) (sum, count float64) {
	raw, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.Contains(line, `resource="configmaps"`) && !strings.Contains(line, `resource="secrets"`) {
			continue
		}
		var v float64
		fields := strings.Fields(line)
		if len(fields) == 2 {
			_, _ = fmt.Sscan(fields[1], &v)
		}
		switch {
		case strings.HasPrefix(line, "apiserver_watch_cache_read_wait_seconds_sum{"):
			sum += v
		case strings.HasPrefix(line, "apiserver_watch_cache_read_wait_seconds_count{"):
			count += v
		}
	}
	return sum, count
}

func reportPercentiles(b *testing.B, name string, ds []time.Duration) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	at := func(p float64) float64 { return float64(ds[int(p*float64(len(ds)-1))]) / 1e6 }
	b.ReportMetric(at(0.5), name+"-p50-ms")
	b.ReportMetric(at(0.99), name+"-p99-ms")
}

// requestTrace records how long the API server took to answer each
// ConfigMap and Secret request (until its response headers), by kind of
// request.
type requestTrace struct {
	mu    sync.Mutex
	byKey map[string][]time.Duration // guarded by mu
}

func (rt *requestTrace) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		start := time.Now()
		resp, err := next.RoundTrip(req)
		key := requestKind(req)
		if key != "" {
			rt.mu.Lock()
			if rt.byKey == nil {
				rt.byKey = map[string][]time.Duration{}
			}
			rt.byKey[key] = append(rt.byKey[key], time.Since(start))
			rt.mu.Unlock()
		}
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// requestKind names ConfigMap and Secret requests: "configmaps GET",
// "secrets WATCH initial-events"…; "" for the rest.
func requestKind(req *http.Request) string {
	var resource string
	for _, r := range []string{"configmaps", "secrets"} {
		if strings.Contains(req.URL.Path, "/"+r) {
			resource = r
		}
	}
	if resource == "" {
		return ""
	}
	q := req.URL.Query()
	verb := req.Method
	if q.Get("watch") == "true" || q.Get("watch") == "1" {
		verb = "WATCH"
		if q.Get("sendInitialEvents") == "true" {
			verb += " initial-events"
		}
	} else if !strings.Contains(strings.TrimPrefix(req.URL.Path[strings.Index(req.URL.Path, resource):], resource), "/") {
		verb = "LIST"
	}
	return resource + " " + verb
}

func (rt *requestTrace) report(b *testing.B) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for key, ds := range rt.byKey {
		slices.Sort(ds)
		b.Logf("%-40s n=%-5d headers p50 %v p99 %v", key, len(ds), ds[len(ds)/2], ds[int(0.99*float64(len(ds)-1))])
	}
}
