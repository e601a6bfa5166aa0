package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// scratchPod is a pod with one emptyDir, "scratch".
func scratchPod(name string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s}
spec:
  containers: [{name: c, image: busybox}]
  volumes:
  - {name: scratch, emptyDir: {}}
`, name)
}

// pods joins pod manifests into one multi-document file.
func pods(names ...string) string {
	var docs []string
	for _, name := range names {
		docs = append(docs, scratchPod(name))
	}
	return strings.Join(docs, "---\n")
}

// marked waits until pod default/name is ready, writes a marker file into
// its emptyDir and returns the pod and the marker's path.
func (a *agent) marked(name string) (apiPod, string) {
	a.t.Helper()
	p := a.waitPod("default", name, 10*time.Second, ready)
	marker := filepath.Join(p.volume("scratch").Path, "marker")
	if err := os.WriteFile(marker, []byte(name), 0o644); err != nil {
		a.t.Fatal(err)
	}
	return p, marker
}

// podWatch polls /v1/pods in the background and records every answer in
// which a pod is missing, has another UID, or its emptyDir is not Mounted.
type podWatch struct {
	a     *agent
	want  map[string]string // name → UID
	stop  chan struct{}
	done  chan struct{}
	polls int
	bad   []string
}

func (a *agent) watchPods(ps ...apiPod) *podWatch {
	w := &podWatch{a: a, want: map[string]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	for _, p := range ps {
		w.want[p.Name] = p.UID
	}
	go w.run()
	return w
}

func (w *podWatch) run() {
	defer close(w.done)
	for {
		select {
		case <-w.stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
		code, body := w.a.get("/v1/pods")
		var out struct{ Pods []apiPod }
		if code != http.StatusOK || json.Unmarshal([]byte(body), &out) != nil {
			continue // not an answer about the pods
		}
		w.polls++
		for name, uid := range w.want {
			if msg := w.check(out.Pods, name, uid); msg != "" && len(w.bad) < 5 {
				w.bad = append(w.bad, msg)
			}
		}
	}
}

func (w *podWatch) check(ps []apiPod, name, uid string) string {
	for _, p := range ps {
		if p.Name != name {
			continue
		}
		if v := p.volume("scratch"); p.UID != uid || v.State != "Mounted" {
			return fmt.Sprintf("pod %s: uid %s, scratch %+v", name, p.UID, v)
		}
		return ""
	}
	return fmt.Sprintf("pod %s missing", name)
}

// end stops the watch and fails the test if a pod was ever seen missing or
// changed.
func (w *podWatch) end() {
	w.a.t.Helper()
	close(w.stop)
	<-w.done
	if w.polls < 10 {
		w.a.t.Errorf("only %d answers of /v1/pods during the change", w.polls)
	}
	for _, msg := range w.bad {
		w.a.t.Errorf("during the change: %s", msg)
	}
}

// untouched fails unless the pod's marker is intact and the agent logged
// no teardown of a volume of it.
func (a *agent) untouched(p apiPod, marker string) {
	a.t.Helper()
	checkFile(a.t, marker, p.Name)
	for _, line := range strings.Split(a.logs.String(), "\n") {
		if strings.Contains(line, "volume torn down") && strings.Contains(line, p.UID) {
			a.t.Errorf("pod %s was torn down: %s", p.Name, line)
		}
	}
}

// rename renames within the manifest directory.
func (a *agent) rename(from, to string) {
	a.t.Helper()
	if err := os.Rename(filepath.Join(a.manifests, from), filepath.Join(a.manifests, to)); err != nil {
		a.t.Fatal(err)
	}
}

// `mv a.yaml b.yaml`, where b.yaml held another pod: web moves from a to b
// and is never torn down; b's own pod goes.
func TestManifestMoveOverAnotherFileKeepsData(t *testing.T) {
	a := newAgent(t)
	a.writeManifest("a.yaml", scratchPod("web"))
	a.writeManifest("b.yaml", scratchPod("db"))
	a.start()
	web, marker := a.marked("web")
	db := a.waitPod("default", "db", 10*time.Second, ready)

	w := a.watchPods(web)
	a.rename("a.yaml", "b.yaml")
	a.waitPodDirGone(db.UID)
	time.Sleep(time.Second) // a wrong teardown of web would have run by now
	w.end()
	a.untouched(web, marker)
}

// A deploy renames two rewritten files into place, one after the other:
// db moves from z.yaml to a.yaml. In either order db keeps its data, and
// no duplicate is left in /v1/sources.
func TestManifestTwoFileRenameKeepsData(t *testing.T) {
	for _, order := range []string{"receiving file first", "giving file first"} {
		t.Run(order, func(t *testing.T) {
			a := newAgent(t)
			a.writeManifest("a.yaml", pods("web"))
			a.writeManifest("z.yaml", pods("db", "cache"))
			a.start()
			db, marker := a.marked("db")

			w := a.watchPods(db)
			renames := []string{"a.yaml", "z.yaml"}
			if order == "giving file first" {
				renames = []string{"z.yaml", "a.yaml"}
			}
			next := map[string]string{"a.yaml": pods("web", "db"), "z.yaml": pods("cache")}
			for _, name := range renames {
				if err := os.WriteFile(filepath.Join(a.manifests, ".new-"+name), []byte(next[name]), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for _, name := range renames {
				a.rename(".new-"+name, name)
			}
			waitFor(t, 5*time.Second, "no duplicate in /v1/sources", func() (bool, string) {
				_, body := a.get("/v1/sources")
				return !strings.Contains(body, "duplicate"), body
			})
			time.Sleep(time.Second) // past the settle delay
			if _, body := a.get("/v1/sources"); strings.Contains(body, "duplicate") || strings.Contains(body, "error") {
				t.Errorf("/v1/sources after the move: %s", body)
			}

			// db belongs to a.yaml now: deleting z.yaml leaves it alone.
			a.removeManifest("z.yaml")
			time.Sleep(time.Second)
			w.end()
			a.untouched(db, marker)
		})
	}
}

// The manifest directory replaced by another one: `mv m m.old; mkdir m;
// cp … m/`. The new content is served within seconds, not at the resync,
// and a pod in both is never touched.
func TestManifestDirectoryReplaced(t *testing.T) {
	a := newAgent(t)
	parent := t.TempDir()
	a.manifests = filepath.Join(parent, "m")
	if err := os.Mkdir(a.manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	a.writeManifest("web.yaml", scratchPod("web"))
	a.writeManifest("old.yaml", scratchPod("old"))
	a.start()
	web, marker := a.marked("web")
	old := a.waitPod("default", "old", 10*time.Second, ready)

	w := a.watchPods(web)
	// Each step takes a moment, as a script or a person at a shell would:
	// meanwhile the directory is missing, then empty.
	if err := os.Rename(a.manifests, filepath.Join(parent, "m.old")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if err := os.Mkdir(a.manifests, 0o755); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	for name, content := range map[string]string{"web.yaml": scratchPod("web"), "new.yaml": scratchPod("new")} {
		if err := os.WriteFile(filepath.Join(a.manifests, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	took := waitFor(t, 10*time.Second, "the new directory's pod", func() (bool, string) {
		p, ok := a.pod("default", "new")
		return ok && p.Ready, fmt.Sprint(a.pods())
	})
	figure(t, "replaced manifest directory to new pod ready", took)
	a.waitPodDirGone(old.UID)
	w.end()
	a.untouched(web, marker)
}

// A git-sync style deploy: --manifests names a symlink that is swapped to
// a new directory with `ln -sfn v2 current.tmp && mv -T current.tmp
// current`. Every swap is followed within seconds, and a pod in both
// versions is never touched.
func TestManifestSymlinkSwap(t *testing.T) {
	a := newAgent(t)
	parent := t.TempDir()
	version := func(v string, names ...string) {
		dir := filepath.Join(parent, v)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if err := os.WriteFile(filepath.Join(dir, name+".yaml"), []byte(scratchPod(name)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	swap := func(v string) {
		tmp := filepath.Join(parent, "current.tmp")
		if err := os.Symlink(v, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(parent, "current")); err != nil {
			t.Fatal(err)
		}
	}
	version("v1", "web", "old")
	swap("v1")
	a.manifests = filepath.Join(parent, "current")
	a.start()
	web, marker := a.marked("web")
	old := a.waitPod("default", "old", 10*time.Second, ready)

	w := a.watchPods(web)
	for i, v := range []string{"v2", "v3"} {
		name := "new-" + v
		version(v, "web", name)
		swap(v)
		took := waitFor(t, 10*time.Second, "pod "+name+" of "+v, func() (bool, string) {
			p, ok := a.pod("default", name)
			return ok && p.Ready, fmt.Sprint(a.pods())
		})
		figure(t, fmt.Sprintf("symlink swap %d to new pod ready", i+1), took)
		if i == 0 {
			a.waitPodDirGone(old.UID)
		}
		// git-sync removes the worktree it swapped away from.
		prev := map[string]string{"v2": "v1", "v3": "v2"}[v]
		if err := os.RemoveAll(filepath.Join(parent, prev)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second)
	w.end()
	a.untouched(web, marker)
	waitFor(t, 10*time.Second, "pod new-v2, in v2 only, gone after the swap to v3", func() (bool, string) {
		_, ok := a.pod("default", "new-v2")
		return !ok, fmt.Sprint(a.pods())
	})
}
