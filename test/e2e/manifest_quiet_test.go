package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// git checkout and vim replace a manifest by removing its name and creating
// it anew (unlink then create; rename to a backup then create): the quiet
// period makes the agent read the name only once it is back, so the running
// pod keeps its emptyDir data. The package test TestToolsGapsAreCovered
// shows, with the same tools, that without the quiet period a read in that
// gap sees the pod deleted, and logs the gap each tool leaves (between two
// consecutive system calls of one process, far below the 50 ms).
func TestEditorsKeepARunningPodsData(t *testing.T) {
	a, p, _ := startApp(t)
	data := filepath.Join(p.volume("scratch").Path, "db")
	if err := os.WriteFile(data, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	scratch := inode(t, p.volume("scratch").Path)
	labels := filepath.Join(p.volume("info").Path, "labels")
	run := func(argv ...string) {
		t.Helper()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir = a.manifests
		cmd.Env = append(os.Environ(), "HOME="+t.TempDir(), "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", argv, err, out)
		}
	}
	waitTier := func(tier string) {
		t.Helper()
		waitFor(t, 10*time.Second, "labels with tier "+tier, func() (bool, string) {
			got, _ := os.ReadFile(labels)
			return strings.Contains(string(got), `tier="`+tier+`"`), string(got)
		})
	}
	tools := 0
	if _, err := exec.LookPath("git"); err == nil {
		tools++
		git := []string{"git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "advice.detachedHead=false"}
		run(append(git, "init", "-q", "-b", "main", ".")...)
		run(append(git, "add", "-A")...)
		run(append(git, "commit", "-q", "-m", "web")...)
		run(append(git, "checkout", "-q", "-b", "next")...)
		pod, err := os.ReadFile(filepath.Join(a.manifests, "pod.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		a.writeManifest("pod.yaml", strings.Replace(string(pod), "tier: web", "tier: git", 1))
		waitTier("git")
		run(append(git, "commit", "-q", "-a", "-m", "git")...)
		run(append(git, "checkout", "-q", "main")...) // unlink(pod.yaml), then create it
		waitTier("web")
	}
	if _, err := exec.LookPath("vim"); err == nil {
		tools++
		// backupskip is emptied: its default skips the backup under /tmp.
		run("vim", "-u", "NONE", "-N", "-es", "-c", "set backupskip= backupcopy=no writebackup",
			"-c", "%s/tier: web/tier: vim/", "-c", "wq", "pod.yaml") // rename to pod.yaml~, then create pod.yaml
		waitTier("vim")
	}
	if tools == 0 {
		t.Skip("neither git nor vim is installed")
	}
	checkFile(t, data, "precious")
	if got := inode(t, p.volume("scratch").Path); got != scratch {
		t.Errorf("the emptyDir was made anew (inode %d, was %d)", got, scratch)
	}
	if strings.Contains(a.logs.String(), "volume torn down") {
		t.Errorf("a volume was torn down while the manifest was rewritten")
	}
}

// The manifest source hashes the bytes of a ConfigMap's document for its
// version: a comment and whitespace added give a new version, so each
// volume of the ConfigMap is refreshed once, and that refresh writes
// nothing: the same payload directory, the same files.
func TestCommentEditWritesNothing(t *testing.T) {
	a, p, _ := startApp(t)
	type state struct {
		data string // ..data's target
		file uint64 // the inode of a file of the payload
	}
	volumes := map[string]string{"config": "conf/app.conf", "all": "cfg/level"}
	look := func() map[string]state {
		out := map[string]state{}
		for name, file := range volumes {
			dir := p.volume(name).Path
			target, err := os.Readlink(filepath.Join(dir, "..data"))
			if err != nil {
				t.Fatal(err)
			}
			out[name] = state{data: target, file: inode(t, filepath.Join(dir, file))}
		}
		return out
	}
	before := look()
	refreshed := func() int { return strings.Count(a.logs.String(), `"volume refreshed"`) }
	n := refreshed()
	a.writeManifest("config.yaml", "# reformatted\n"+strings.Replace(fmt.Sprintf(appConfig, "color=blue"), "level: info", "level:    info  ", 1))
	waitFor(t, 10*time.Second, "both volumes of the ConfigMap refreshed", func() (bool, string) {
		return refreshed() >= n+2, tail(a.logs.String(), 5)
	})
	if after := look(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("the refresh rewrote the payload: %v, was %v", after, before)
	}
	time.Sleep(500 * time.Millisecond) // a second refresh would show by now
	if got := refreshed(); got != n+2 {
		t.Errorf("%d refreshes, want one per volume (2)", got-n)
	}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}
