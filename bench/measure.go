package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/moby/sys/mountinfo"
	v1 "k8s.io/api/core/v1"
)

// workers is how many pods the benchmark creates or deletes at once, as a
// controller or a node full of pods starting would.
const workers = 16

// readyTimeout bounds every wait for a pod to be ready.
const readyTimeout = 2 * time.Minute

// createAll creates pods from workers goroutines and waits until each is
// ready through /v1/pods/{uid}?wait=. A pod's figure runs from just before
// its creation to the agent's answer. It returns the figures and the time
// from the first creation to the last answer.
func createAll(r *runner, a *agent, c cluster, pods []*v1.Pod) ([]time.Duration, time.Duration) {
	lat := make([]time.Duration, len(pods))
	var waits sync.WaitGroup
	start := time.Now()
	forEach(len(pods), func(i int) {
		t0 := time.Now()
		c.putPod(pods[i])
		uid := c.uid(pods[i])
		waits.Add(1)
		go func() {
			defer waits.Done()
			done, err := a.waitReady(context.Background(), uid, readyTimeout)
			if err != nil {
				r.Errorf("pod %s not ready: %v", pods[i].Name, err)
			}
			lat[i] = done.Sub(t0)
		}()
	})
	waits.Wait()
	if r.Failed() {
		r.Fatalf("pods were not ready; agent log:\n%s", a.logTail())
	}
	return lat, time.Since(start)
}

// deleteAll deletes pods from workers goroutines and waits until each
// pod's directory is gone, the last step of its teardown. A pod's figure
// runs from just before its deletion.
func deleteAll(r *runner, a *agent, c cluster, pods []*v1.Pod) ([]time.Duration, time.Duration) {
	uids := make([]string, len(pods))
	for i, p := range pods {
		uids[i] = c.uid(p)
	}
	t0 := make([]time.Time, len(pods))
	var mu sync.Mutex
	deleted := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(deleted)
		forEach(len(pods), func(i int) {
			mu.Lock()
			t0[i] = time.Now()
			mu.Unlock()
			c.deletePod(pods[i])
		})
	}()
	lat := make([]time.Duration, len(pods))
	pending := map[int]bool{}
	for i := range pods {
		pending[i] = true
	}
	deadline := time.Now().Add(readyTimeout)
	for len(pending) > 0 {
		if time.Now().After(deadline) {
			r.Fatalf("%d pods not torn down within %v; agent log:\n%s", len(pending), readyTimeout, a.logTail())
		}
		for i := range pending {
			mu.Lock()
			began := t0[i]
			mu.Unlock()
			if began.IsZero() {
				continue
			}
			if _, err := os.Lstat(filepath.Join(a.root, "pods", uids[i])); os.IsNotExist(err) {
				lat[i] = time.Since(began)
				delete(pending, i)
			}
		}
		time.Sleep(time.Millisecond)
	}
	<-deleted
	return lat, time.Since(start)
}

// forEach calls fn(0..n-1) from workers goroutines and waits for them.
func forEach(n int, fn func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				fn(i)
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}

// waitContent polls files until every one holds want, and returns when each
// did (relative to start).
func waitContent(r *runner, files []string, want []byte, start time.Time) []time.Duration {
	lat := make([]time.Duration, len(files))
	pending := map[int]bool{}
	for i := range files {
		pending[i] = true
	}
	deadline := start.Add(readyTimeout)
	for len(pending) > 0 {
		if time.Now().After(deadline) {
			r.Fatalf("%d of %d files never showed the update (e.g. %s)", len(pending), len(files), files[anyKey(pending)])
		}
		for i := range pending {
			if b, err := os.ReadFile(files[i]); err == nil && bytes.Equal(b, want) {
				lat[i] = time.Since(start)
				delete(pending, i)
			}
		}
		time.Sleep(200 * time.Microsecond)
	}
	return lat
}

func anyKey(m map[int]bool) int {
	for k := range m {
		return k
	}
	return -1
}

// mountIDs returns the mount IDs at or below dir, from this process's
// mount table (the agent's, unless it runs in its own namespace).
func mountIDs(r *runner, dir string) map[int]string {
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		r.Fatalf("mount table: %v", err)
	}
	ids := map[int]string{}
	for _, m := range infos {
		ids[m.ID] = m.Mountpoint
	}
	return ids
}

// volumePath returns where the agent says a pod's volume is.
func volumePath(r *runner, a *agent, uid, volume string) string {
	for _, p := range a.pods() {
		if p.UID != uid {
			continue
		}
		for _, v := range p.Volumes {
			if v.Name == volume && v.Path != "" {
				return v.Path
			}
		}
	}
	r.Fatalf("pod %s has no path for volume %s", uid, volume)
	return ""
}
