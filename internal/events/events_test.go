package events

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/volume-agent/volume-agent/internal/volume"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// wait is how long an event may take to reach the API server.
const wait = 5 * time.Second

// start runs a Recorder on a fake clientset until the test ends.
func start(t *testing.T) (*Recorder, *fake.Clientset) {
	t.Helper()
	return startWith(t, Config{NodeName: "node-1", Source: "api"})
}

// startWith runs a Recorder of cfg on a fake clientset until the test ends.
func startWith(t *testing.T, cfg Config) (*Recorder, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset()
	cfg.Client = client
	r := New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run = %v, want nil", err)
			}
		case <-time.After(wait):
			t.Error("Run did not return after its context ended")
		}
	})
	return r, client
}

func spec(source, volumeName string) *volume.Spec {
	return &volume.Spec{
		Pod: &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", UID: "uid-1"},
			Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: volumeName}}}},
		Volume: &v1.Volume{Name: volumeName},
		Source: source,
	}
}

// events lists the events in namespace ns.
func events(t *testing.T, client *fake.Clientset) []v1.Event {
	t.Helper()
	list, err := client.CoreV1().Events("ns").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// waitEvents waits until n events exist.
func waitEvents(t *testing.T, client *fake.Clientset, n int) []v1.Event {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		got := events(t, client)
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d events after %v, want %d: %+v", len(got), wait, n, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSetUpEvents(t *testing.T) {
	r, client := start(t)
	r.SetUpSucceeded(spec("api", "config"))
	r.SetUpFailed(spec("api", "creds"), errors.New(`secret "creds" not found`))
	r.SizeLimitExceeded(spec("api", "scratch"), `Usage of EmptyDir volume "scratch" exceeds the limit "1Mi": 2097152 bytes used`)
	got := waitEvents(t, client, 3)
	byReason := map[string]v1.Event{}
	for _, e := range got {
		byReason[e.Reason] = e
	}
	for _, want := range []struct {
		reason, typ string
		contains    []string
	}{
		{ReasonSuccessfulMount, v1.EventTypeNormal, []string{`every volume of the pod: "config"`}},
		{ReasonFailedMount, v1.EventTypeWarning, []string{`volume "creds"`, `secret "creds" not found`}},
		{ReasonSizeLimitExceeded, v1.EventTypeWarning, []string{`volume "scratch"`, `"1Mi"`, "2097152 bytes"}},
	} {
		e, ok := byReason[want.reason]
		if !ok {
			t.Errorf("no %s event among %+v", want.reason, got)
			continue
		}
		if e.Type != want.typ {
			t.Errorf("%s event of type %s, want %s", want.reason, e.Type, want.typ)
		}
		for _, s := range want.contains {
			if !strings.Contains(e.Message, s) {
				t.Errorf("%s message %q does not contain %s", want.reason, e.Message, s)
			}
		}
		obj := e.InvolvedObject
		if obj.Kind != "Pod" || obj.Namespace != "ns" || obj.Name != "app" || obj.UID != "uid-1" {
			t.Errorf("%s event is about %+v, want the pod ns/app", want.reason, obj)
		}
		if e.Source.Host != "node-1" || e.Source.Component != "volume-agent" {
			t.Errorf("%s event source %+v, want volume-agent on node-1", want.reason, e.Source)
		}
	}
}

// TestOnlyAPIPodsGetEvents: pods of another source (the manifest
// directory) do not exist in the API server; nil specs and pods are
// ignored.
func TestOnlyAPIPodsGetEvents(t *testing.T) {
	r, client := start(t)
	r.SetUpSucceeded(spec("manifests", "static"))
	r.SetUpFailed(spec("manifests", "static"), errors.New("boom"))
	r.SizeLimitExceeded(spec("manifests", "static"), "over")
	r.SetUpSucceeded(nil)
	r.SetUpFailed(nil, errors.New("boom"))
	r.SetUpSucceeded(&volume.Spec{Source: "api", Volume: &v1.Volume{Name: "v"}})
	r.SetUpFailed(&volume.Spec{Source: "api", Volume: &v1.Volume{Name: "v"}}, errors.New("boom"))
	// A marker event after the ignored ones: once it has arrived, the
	// others would have too.
	r.SetUpSucceeded(spec("api", "marker"))
	waitEvents(t, client, 1)
	time.Sleep(100 * time.Millisecond)
	if got := events(t, client); len(got) != 1 || !strings.Contains(got[0].Message, `"marker"`) {
		t.Errorf("events = %+v, want only the marker's", got)
	}
}

// TestNewStartsNothing: a Recorder that is never run leaves no goroutine;
// what it is told before Run is sent when Run starts.
func TestNewStartsNothing(t *testing.T) {
	client := fake.NewClientset()
	r := New(Config{Client: client, NodeName: "node-1", Source: "api"})
	r.SetUpSucceeded(spec("api", "early"))
	goleak.VerifyNone(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if got := waitEvents(t, client, 1); !strings.Contains(got[0].Message, `"early"`) {
		t.Errorf("events = %+v, want the one reported before Run", got)
	}
}

// TestAfterRun: events reported after Run returned are dropped without
// blocking or panicking (the reconciler may report while shutting down).
func TestAfterRun(t *testing.T) {
	client := fake.NewClientset()
	r := New(Config{Client: client, NodeName: "node-1", Source: "api"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	r.SetUpSucceeded(spec("api", "config"))
	waitEvents(t, client, 1)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	r.SetUpFailed(spec("api", "config"), errors.New("boom"))
	r.mu.Lock()
	kept := len(r.early)
	r.mu.Unlock()
	if kept != 0 {
		t.Errorf("%d events kept after Run returned, want them dropped", kept)
	}
	goleak.VerifyNone(t)
}

// TestOneSuccessEventPerPod: the set-ups of a pod's volumes send one
// SuccessfulMountVolume, by the one after which the pod is ready, naming
// its volumes; later set-ups of the pod send none; a pod forgotten and
// back is announced again. Failures are sent as they come.
func TestOneSuccessEventPerPod(t *testing.T) {
	var ready atomic.Bool
	r, client := startWith(t, Config{NodeName: "node-1", Source: "api", Ready: func(uid types.UID) bool { return uid == "uid-1" && ready.Load() }})
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", UID: "uid-1"},
		Spec: v1.PodSpec{Volumes: []v1.Volume{{Name: "config"}, {Name: "creds"}, {Name: "data"}}}}
	setUp := func(name string) {
		r.SetUpSucceeded(&volume.Spec{Pod: pod, Volume: &pod.Spec.Volumes[0], Source: "api"})
	}
	setUp("config")
	setUp("creds") // the pod is not ready yet
	ready.Store(true)
	setUp("data")
	setUp("data") // as when two volumes finish at once
	// A marker after them: once it has arrived, the others would have too.
	r.SetUpFailed(spec("api", "marker"), errors.New("marker"))
	waitEvents(t, client, 2)
	successes := func() []v1.Event {
		var out []v1.Event
		for _, e := range events(t, client) {
			if e.Reason == ReasonSuccessfulMount {
				out = append(out, e)
			}
		}
		return out
	}
	got := successes()
	if len(got) != 1 {
		t.Fatalf("%d SuccessfulMountVolume events, want 1: %+v", len(got), got)
	}
	if want := `MountVolume.SetUp succeeded for every volume of the pod: "config", "creds", "data"`; got[0].Message != want || got[0].Count > 1 {
		t.Errorf("event %q (count %d), want %q once", got[0].Message, got[0].Count, want)
	}
	r.ForgetPod("uid-1")
	setUp("config")
	deadline := time.Now().Add(wait)
	for len(successes()) != 1 || successes()[0].Count < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("a pod forgotten and back was not announced again: %+v", successes())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestVolumeNamesBounded: the message names at most maxNames volumes.
func TestVolumeNamesBounded(t *testing.T) {
	pod := &v1.Pod{}
	for i := range 12 {
		pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: fmt.Sprintf("v%d", i)})
	}
	want := `"v0", "v1", "v2", "v3", "v4", "v5", "v6", "v7", "v8", "v9", and 2 more`
	if got := volumeNames(pod); got != want {
		t.Errorf("volumeNames = %s, want %s", got, want)
	}
}
