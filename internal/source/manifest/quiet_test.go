package manifest

import (
	"bufio"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/volume-agent/volume-agent/internal/atomicwriter"
)

// The quiet period exists for the tools below: each replaces a manifest by
// removing its name and creating it anew, so the name is missing for a
// moment, and a reader that looks then removes the file's pods and deletes
// their emptyDir data. TestToolsGapsAreCovered runs each real tool where it
// is installed (else the same system calls), logs the gap it leaves, and
// shows that
//   - without a quiet period, a read in the gap sees the pod deleted: the
//     gap is held open (the tool stopped by strace right after its removal,
//     or the same calls paused there) until the source has read it, so this
//     does not depend on timing;
//   - with the real quiet period the pod is never seen deleted, whenever the
//     tool's gap is shorter than the quiet period: the source reads a name
//     no sooner than debounceDelay after handling its removal, and by then
//     the name is back. A gap as long as the quiet period, which only a
//     starved machine gives, is logged as a finding, not failed.
//
// A mounted configMap's `..data` swap (the kubelet's atomic writer, and the
// agent's) never removes a name: it needs no quiet period at all.

// quietTool is a way to replace the manifest web.yaml.
type quietTool struct {
	name string
	// prepare, when set, readies dir for the tool, which will write next.
	prepare func(t *testing.T, dir, next string)
	// argv is the command run in dir, nil when its program is not installed.
	argv func(dir, next string) []string
	// calls makes the same system calls as the tool in dir, calling inGap,
	// when set, right after the name is removed. It returns when the name
	// was removed and when it was created again; zero times for a tool that
	// never removes it.
	calls func(t *testing.T, dir, next string, inGap func()) (removed, created time.Time)
}

var quietTools = []quietTool{
	{
		name:    "git checkout",
		prepare: prepareGit,
		argv: func(string, string) []string {
			return installed("git", "-c", "advice.detachedHead=false", "checkout", "-q", "next")
		},
		// checkout_entry: unlink(f), then open(f, O_CREAT|O_EXCL), write, close.
		calls: func(t *testing.T, dir, next string, inGap func()) (time.Time, time.Time) {
			f := filepath.Join(dir, "web.yaml")
			removed := now(t, unix.Unlink(f))
			gap(inGap)
			created := writeNew(t, f, unix.O_EXCL, next, false)
			return removed, created
		},
	},
	{
		name: "vim, backupcopy=no",
		argv: func(_, next string) []string {
			// backupskip is emptied: its default skips the backup under /tmp.
			return installed("vim", "-u", "NONE", "-N", "-es", "-c", "set backupskip= backupcopy=no writebackup",
				"-c", "%s/image: v1/image: v2/", "-c", "wq", "web.yaml")
		},
		// rename(f, f~), open(f, O_CREAT), write, fsync, close, unlink(f~).
		calls: func(t *testing.T, dir, next string, inGap func()) (time.Time, time.Time) {
			f := filepath.Join(dir, "web.yaml")
			removed := now(t, unix.Rename(f, f+"~"))
			gap(inGap)
			created := writeNew(t, f, 0, next, true)
			now(t, unix.Unlink(f+"~"))
			return removed, created
		},
	},
	{
		name: "rm then cp from a shell",
		argv: func(dir, next string) []string {
			return []string{"/bin/sh", "-c", "rm web.yaml; cp " + filepath.Join(filepath.Dir(dir), "next.yaml") + " web.yaml"}
		},
		calls: nil, // sh, rm and cp are always there
	},
	{
		name: "configMap ..data swap",
		prepare: func(t *testing.T, dir, _ string) {
			writeData(t, dir, pod("web", "v1"))
		},
		calls: func(t *testing.T, dir, next string, _ func()) (time.Time, time.Time) {
			writeData(t, dir, next)
			return time.Time{}, time.Time{}
		},
	},
}

func TestToolsGapsAreCovered(t *testing.T) {
	for _, tool := range quietTools {
		t.Run(tool.name, func(t *testing.T) {
			t.Run("no quiet period, read in the gap", func(t *testing.T) {
				h, dir, next, dropped := startTool(t, tool, debounce{})
				runHeld(t, h, tool, dir, next, dropped)
				h.eventually("the new content", func() bool { return h.image("web") == "v2" })
				switch {
				case tool.name == "configMap ..data swap" && dropped.Load():
					t.Errorf("the pod was seen deleted, though a ..data swap never removes the name")
				case tool.name != "configMap ..data swap" && !dropped.Load():
					t.Errorf("the pod was never seen deleted while the name was missing")
				}
			})
			t.Run("quiet period", func(t *testing.T) {
				h, dir, next, dropped := startTool(t, tool, debounce{delay: debounceDelay, max: debounceMax})
				g, ok := runFree(t, tool, dir, next)
				h.eventually("the new content", func() bool { return h.image("web") == "v2" })
				switch {
				case !ok:
					t.Logf("%s never removes web.yaml", tool.name)
				case g >= debounceDelay:
					t.Logf("FINDING: %s left web.yaml missing for %v, not less than the quiet period (%v): "+
						"a busy machine can stretch its gap past it", tool.name, g, debounceDelay)
					return
				default:
					t.Logf("%s left web.yaml missing for at most %v (quiet period %v)", tool.name, g, debounceDelay)
				}
				if dropped.Load() {
					t.Errorf("the pod was seen deleted, though the name was back after %v, within the quiet period", g)
				}
			})
		})
	}
}

// startTool prepares a directory for tool with web.yaml defining pod web at
// image v1, runs a source with quiet period q on it, and returns it with
// the directory, the content the tool writes next (image v2) and a flag set
// whenever the source publishes a state without pod web from now on.
func startTool(t *testing.T, tool quietTool, q debounce) (*harness, string, string, *atomic.Bool) {
	t.Helper()
	parent := t.TempDir()
	dir := filepath.Join(parent, "manifests")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	next := pod("web", "v2")
	writeFile(t, parent, "next.yaml", next)
	if tool.prepare != nil {
		tool.prepare(t, dir, next)
	} else {
		writeFile(t, dir, "web.yaml", pod("web", "v1"))
	}
	old := time.Now().Add(-10 * settleDelay) // written well before the start
	if err := os.Chtimes(filepath.Join(dir, "web.yaml"), old, old); err != nil {
		t.Fatal(err)
	}
	h, dropped := watchWeb(t, dir, q)
	if h.image("web") != "v1" {
		t.Fatalf("pods %v at start, want web at v1", podNames(h.src.Pods()))
	}
	return h, dir, next, dropped
}

// watchWeb runs a source with quiet period q on dir and returns it with a
// flag set whenever it publishes a state without pod web from now on.
func watchWeb(t *testing.T, dir string, q debounce) (*harness, *atomic.Bool) {
	t.Helper()
	var h *harness
	var dropped atomic.Bool
	h = newHarness(t, dir, func(c *Config) {
		c.OnChange = func() {
			if !slices.Contains(podNames(h.src.Pods()), "default/web") {
				dropped.Store(true)
			}
			h.notify()
		}
	})
	h.src.debounce = q
	h.run()
	dropped.Store(false)
	return h, &dropped
}

// A pod moved to another file by deleting the old file first and writing
// the new one a moment later (as `git checkout` of a commit that moves it
// does) moves in one step: the deletion waits for the file written after
// it, so the pod is never seen deleted.
func TestMoveByDeleteThenWriteIsOneStep(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "a.yaml", pod("web", "v1"))
	h, dropped := watchWeb(t, dir, debounce{delay: debounceDelay, max: debounceMax})
	removed := now(t, os.Remove(filepath.Join(dir, "a.yaml")))
	time.Sleep(10 * time.Millisecond) // more than a batch of events apart, less than the quiet period
	created := writeNew(t, filepath.Join(dir, "b.yaml"), unix.O_EXCL, pod("web", "v2"), false)
	h.eventually("the pod from b.yaml", func() bool { return h.image("web") == "v2" })
	if g := created.Sub(removed); g >= debounceDelay {
		t.Skipf("the machine took %v between the two steps, not less than the quiet period (%v)", g, debounceDelay)
	}
	if dropped.Load() {
		t.Errorf("the pod was seen deleted between the deletion of a.yaml and the creation of b.yaml")
	}
}

// eventually waits until cond holds, longer than expect does: a loaded
// machine may take a while to run the tool.
func (h *harness) eventually(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("%s: not seen within 20s; status %+v, pods %v", what, h.src.Status(), podNames(h.src.Pods()))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runHeld runs the tool with its gap held open until the source has seen
// the pod deleted (dropped), or for a tool without a gap straight through.
func runHeld(t *testing.T, h *harness, tool quietTool, dir, next string, dropped *atomic.Bool) {
	t.Helper()
	waitDropped := func() {
		h.eventually("the pod seen deleted in the gap", dropped.Load)
	}
	var argv []string
	if tool.argv != nil {
		argv = tool.argv(dir, next)
	}
	if argv == nil || !hasStrace() {
		if tool.argv != nil {
			t.Logf("%s or strace is not installed: making its system calls", tool.name)
		}
		if tool.calls == nil {
			t.Skipf("strace is not installed: the gap of %s cannot be held open", tool.name)
		}
		tool.calls(t, dir, next, waitDropped)
		return
	}
	trace := filepath.Join(t.TempDir(), "trace")
	cmd := traced(dir, trace, true, argv)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid, continued := 0, false
	defer func() {
		if !continued { // the test failed: end the stopped tool and strace
			if pid > 0 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			_ = cmd.Process.Kill()
		}
		if err := cmd.Wait(); err != nil && continued {
			t.Errorf("%v: %v\n%s", argv, err, out.String())
		}
	}()
	pid = waitStopped(t, trace)
	waitDropped()
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	continued = true
}

// runFree runs the tool without holding it and returns the longest the
// name can have been missing, and false if it never was.
func runFree(t *testing.T, tool quietTool, dir, next string) (time.Duration, bool) {
	t.Helper()
	var argv []string
	if tool.argv != nil {
		argv = tool.argv(dir, next)
	}
	if argv == nil {
		if tool.argv != nil {
			t.Logf("%s is not installed: making its system calls", tool.name)
		}
		removed, created := tool.calls(t, dir, next, nil)
		return created.Sub(removed), !removed.IsZero()
	}
	if !hasStrace() {
		t.Skipf("strace is not installed: the gap %s leaves cannot be measured", tool.name)
	}
	trace := filepath.Join(t.TempDir(), "trace")
	if out, err := traced(dir, trace, false, argv).CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", argv, err, out)
	}
	return gapIn(t, trace)
}

// removals are the system calls that take a name away.
const removals = "unlink,unlinkat,rename,renameat,renameat2"

// traced returns argv run in dir under strace, which writes the calls on
// web.yaml to trace with their times; hold makes it stop the tool (SIGSTOP)
// right after the first removal of web.yaml.
func traced(dir, trace string, hold bool, argv []string) *exec.Cmd {
	// -P matches the name as the call gives it: relative, as these tools do.
	args := []string{"-f", "-qq", "-ttt", "-T", "-o", trace, "-P", "web.yaml", "-P", filepath.Join(dir, "web.yaml"),
		"-e", "trace=" + removals + ",open,openat,creat"}
	if hold {
		args = append(args, "-e", "inject="+removals+":signal=SIGSTOP:when=1")
	}
	cmd := exec.Command("strace", append(append(args, "--"), argv...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+filepath.Dir(trace)) // no viminfo, no user git config
	return cmd
}

var stoppedLine = regexp.MustCompile(`^(\d+) .*--- stopped by SIGSTOP ---`)

// waitStopped waits until strace has stopped the tool and returns its pid.
func waitStopped(t *testing.T, trace string) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		raw, _ := os.ReadFile(trace)
		for _, line := range strings.Split(string(raw), "\n") {
			if m := stoppedLine.FindStringSubmatch(line); m != nil {
				pid, _ := strconv.Atoi(m[1])
				return pid
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	raw, _ := os.ReadFile(trace)
	t.Fatalf("the tool never removed web.yaml; trace:\n%s", raw)
	return 0
}

// traceLine is one line of strace -f -ttt -T: pid, time, call, arguments,
// result and duration.
var traceLine = regexp.MustCompile(`^\d+\s+(\d+\.\d+) (\w+)\((.*)\) += (-?\d+).*<(\d+\.\d+)>$`)

// gapIn returns, from a trace, the longest web.yaml can have been missing:
// from the start of the call that removed it to the end of the open that
// created it again; false when it was never removed.
func gapIn(t *testing.T, trace string) (time.Duration, bool) {
	t.Helper()
	f, err := os.Open(trace)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var removed float64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := traceLine.FindStringSubmatch(sc.Text())
		if m == nil || strings.HasPrefix(m[4], "-") {
			continue
		}
		at, _ := strconv.ParseFloat(m[1], 64)
		took, _ := strconv.ParseFloat(m[5], 64)
		call, args := m[2], m[3]
		switch {
		case removed == 0:
			if slices.Contains(strings.Split(removals, ","), call) && firstPathIs(args, "web.yaml") {
				removed = at
			}
		case (strings.HasPrefix(call, "open") || call == "creat") && strings.Contains(args, "O_CREAT"):
			return time.Duration((at + took - removed) * float64(time.Second)), true
		}
	}
	if removed != 0 {
		t.Fatalf("web.yaml removed and never created again, per %s", trace)
	}
	return 0, false
}

// firstPathIs reports whether the first quoted argument names the file name.
func firstPathIs(args, name string) bool {
	_, rest, ok := strings.Cut(args, `"`)
	path, _, _ := strings.Cut(rest, `"`)
	return ok && filepath.Base(path) == name
}

func hasStrace() bool {
	_, err := exec.LookPath("strace")
	return err == nil
}

// installed returns argv when its program is installed, else nil.
func installed(argv ...string) []string {
	if _, err := exec.LookPath(argv[0]); err != nil {
		return nil
	}
	return argv
}

// prepareGit makes dir a git work tree whose checkout of branch next
// changes web.yaml to next, with web.yaml at image v1 checked out.
func prepareGit(t *testing.T, dir, next string) {
	t.Helper()
	git := func(args ...string) {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "init.defaultBranch=main"}, args...)...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "HOME="+dir, "GIT_CONFIG_NOSYSTEM=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	if _, err := exec.LookPath("git"); err != nil {
		writeFile(t, dir, "web.yaml", pod("web", "v1"))
		return // the same calls are made instead
	}
	git("init", "-q", ".")
	writeFresh(t, dir, "web.yaml", next)
	git("add", "web.yaml")
	git("commit", "-q", "-m", "v2")
	git("branch", "next")
	writeFresh(t, dir, "web.yaml", pod("web", "v1"))
	git("commit", "-q", "-a", "-m", "v1")
}

// writeNew creates f with extra open flags, writes content, fsyncs it when
// sync is set, closes it, and returns when it was created.
func writeNew(t *testing.T, f string, flags int, content string, sync bool) time.Time {
	t.Helper()
	fd, err := unix.Open(f, unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC|flags, 0o644)
	created := now(t, err)
	if _, err := unix.Write(fd, []byte(content)); err != nil {
		t.Fatal(err)
	}
	if sync {
		now(t, unix.Fsync(fd))
	}
	now(t, unix.Close(fd))
	return created
}

// writeData writes web.yaml into dir as the kubelet's atomic writer writes
// a configMap volume: web.yaml -> ..data/web.yaml, ..data -> ..<timestamp>.
func writeData(t *testing.T, dir, content string) {
	t.Helper()
	if _, err := atomicwriter.New(dir).Write(map[string]atomicwriter.File{"web.yaml": {Data: []byte(content), Mode: 0o644}}); err != nil {
		t.Fatal(err)
	}
}

// now fails the test on err and returns the time.
func now(t *testing.T, err error) time.Time {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return time.Now()
}

func gap(inGap func()) {
	if inGap != nil {
		inGap()
	}
}

// Each name waits for its own quiet period, a name that went away also for
// the names written after it, and none longer than debounceMax. A full
// rescan, and every name while the scanner can only rescan, waits for the
// whole directory.
func TestQuietPeriodIsPerName(t *testing.T) {
	const (
		write  = 0x2   // IN_MODIFY
		out    = 0x40  // IN_MOVED_FROM
		create = 0x100 // IN_CREATE
		del    = 0x200 // IN_DELETE
	)
	d := debounce{delay: debounceDelay, max: debounceMax}
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	for _, tc := range []struct {
		name  string
		evs   map[int]event // by time in ms
		whole bool
		// due is what takeLater returns at each time (ms); "*" is a full rescan.
		due map[int][]string
	}{
		{name: "a deletion is put off neither by earlier writes nor by other deletions",
			evs: map[int]event{0: {name: "b.yaml", mask: write}, 10: {name: "a.yaml", mask: del}, 30: {name: "c.yaml", mask: del}},
			due: map[int][]string{49: nil, 50: {"b.yaml"}, 59: nil, 60: {"a.yaml"}, 79: nil, 80: {"c.yaml"}}},
		{name: "a write is not put off by other files' events",
			evs: map[int]event{0: {name: "b.yaml", mask: write}, 20: {name: "c.yaml", mask: write}, 40: {name: "a.yaml", mask: del}},
			due: map[int][]string{49: nil, 50: {"b.yaml"}}},
		{name: "a deletion waits for a file written after it",
			evs: map[int]event{0: {name: "a.yaml", mask: del}, 10: {name: "b.yaml", mask: create}, 40: {name: "b.yaml", mask: write}},
			due: map[int][]string{50: nil, 89: nil, 90: {"a.yaml", "b.yaml"}}},
		{name: "the name back after its gap is a write",
			evs: map[int]event{0: {name: "a.yaml", mask: out}, 1: {name: "a.yaml", mask: create}, 30: {name: "b.yaml", mask: write}},
			due: map[int][]string{50: nil, 51: {"a.yaml"}}},
		{name: "a deletion waits no longer than the cap",
			evs: func() map[int]event {
				evs := map[int]event{0: {name: "a.yaml", mask: del}}
				for ms := 10; ms <= 600; ms += 40 {
					evs[ms] = event{name: "b.yaml", mask: write}
				}
				return evs
			}(),
			due: map[int][]string{499: nil, 500: {"a.yaml"}}},
		{name: "a stream of writes on one name is read at the cap",
			evs: func() map[int]event {
				evs := map[int]event{}
				for ms := 0; ms <= 600; ms += 40 {
					evs[ms] = event{name: "a.yaml", mask: write}
				}
				return evs
			}(),
			due: map[int][]string{499: nil, 500: {"a.yaml"}}},
		{name: "while the scanner can only rescan, names wait for the directory",
			evs:   map[int]event{0: {name: "a.yaml", mask: del}, 40: {name: "b.yaml", mask: write}},
			whole: true,
			due:   map[int][]string{50: nil, 89: nil, 90: {"a.yaml", "b.yaml"}}},
		{name: "a full rescan waits for the directory and takes every name",
			evs: map[int]event{0: {name: "..data", mask: 0x80}, 30: {name: "a.yaml", mask: del}},
			due: map[int][]string{50: nil, 79: nil, 80: {"*", "a.yaml"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newChanges()
			for _, ms := range slices.Sorted(maps.Keys(mergeKeys(tc.evs, tc.due))) {
				if ev, ok := tc.evs[ms]; ok {
					c.add(ev, true, at(ms))
				}
				want, check := tc.due[ms]
				if !check {
					continue
				}
				names, full := c.takeLater(at(ms), d, tc.whole)
				if full {
					names = append([]string{"*"}, names...)
				}
				if !slices.Equal(names, want) {
					t.Errorf("at %d ms: read %v, want %v", ms, names, want)
				}
				if next := c.next(d, tc.whole); c.waiting() && !next.After(at(ms)) {
					t.Errorf("at %d ms: next read at %v, not after now", ms, next.Sub(t0))
				}
			}
		})
	}
}

func mergeKeys(evs map[int]event, due map[int][]string) map[int]bool {
	keys := map[int]bool{}
	for ms := range evs {
		keys[ms] = true
	}
	for ms := range due {
		keys[ms] = true
	}
	return keys
}

// The resync's rescan waits for the quiet period too: a listing at any
// moment could fall in the gap of a name whose event has not been read
// yet, or is waiting for its quiet period, and remove its pods. Here the
// quiet period never ends and resyncs come every 20 ms while vim's backup
// rename holds web.yaml away.
func TestResyncWaitsForTheQuietPeriod(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "web.yaml", pod("web", "v1"))
	h := newHarness(t, dir, func(c *Config) { c.Resync = 20 * time.Millisecond })
	h.src.debounce = debounce{delay: time.Hour, max: time.Hour}
	h.run()
	if err := os.Rename(filepath.Join(dir, "web.yaml"), filepath.Join(dir, "web.yaml~")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // some 15 resyncs
	if !h.havePods("default/web")() {
		t.Errorf("pods %v: a resync read the name in its gap", podNames(h.src.Pods()))
	}
}

// While the scanner can only list the whole directory (here: a replaced
// directory's file is orphaned), reading a file renamed into place at once
// would be a listing taken in the gap of another name, which would find it
// gone and remove its pods. So it waits for the directory to be quiet, as
// does the recheck that drops the orphan. The quiet period never ends here
// and web.yaml's gap (vim's backup rename) is held open for the whole
// test: on a loaded machine too, nothing may read the directory meanwhile.
func TestRenamedInWhileOrphansWaitsForTheQuietDirectory(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "m")
	fill(t, dir, "web", "db")
	h, rec := recording(t, dir, func(s *Source) { s.debounce = debounce{delay: time.Hour, max: time.Hour} })

	// The directory replaced by one that lacks db.yaml: db is orphaned.
	fill(t, filepath.Join(root, "m.new"))
	writeFile(t, filepath.Join(root, "m.new"), "web.yaml", pod("web", "v2"))
	if err := os.Rename(dir, filepath.Join(root, "m.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(root, "m.new"), dir); err != nil {
		t.Fatal(err)
	}
	h.expect("the new directory read", func() bool { return h.image("web") == "v2" })

	// web.yaml's gap, then a file renamed into place, handled in the gap.
	if err := os.Rename(filepath.Join(dir, "web.yaml"), filepath.Join(dir, "web.yaml~")); err != nil {
		t.Fatal(err)
	}
	h.renameIn(t.TempDir(), "api.yaml", pod("api", "v1"))
	h.eventually("api.yaml's rename handled", func() bool { return h.logged("files", "api.yaml") })
	rec.alwaysHad(t, "default/web")
	// The orphan's recheck, due settleDelay after the new directory was
	// read, comes in the gap too.
	h.eventually("the orphan's recheck", func() bool { return h.logged("why", "recheck") })
	rec.alwaysHad(t, "default/web")
	if err := os.Rename(filepath.Join(dir, "web.yaml~"), filepath.Join(dir, "web.yaml")); err != nil {
		t.Fatal(err)
	}
}

// A file renamed into place while the scanner can only list the whole
// directory is read by the listing, once the directory is quiet.
func TestRenamedInWhileOrphansIsReadOnceQuiet(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "m")
	fill(t, dir, "web", "db")
	h, rec := recording(t, dir)
	fill(t, filepath.Join(root, "m.new"), "web")
	if err := os.Rename(dir, filepath.Join(root, "m.old")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(root, "m.new"), dir); err != nil {
		t.Fatal(err)
	}
	h.renameIn(t.TempDir(), "api.yaml", pod("api", "v1"))
	h.eventually("api.yaml read", func() bool { return slices.Contains(podNames(h.src.Pods()), "default/api") })
	h.eventually("db, not in the new directory, gone once it settles", h.havePods("default/api", "default/web"))
	rec.alwaysHad(t, "default/web")
}

// logged reports whether a log entry has field key with value, or with a
// list of values that holds it.
func (h *harness) logged(key, value string) bool {
	for _, e := range h.logs.FilterFieldKey(key).All() {
		switch v := e.ContextMap()[key].(type) {
		case string:
			if v == value {
				return true
			}
		case []any:
			if slices.Contains(v, any(value)) {
				return true
			}
		}
	}
	return false
}
