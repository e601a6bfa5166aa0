package main

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// The system calls of a burst (-syscalls): strace, attached to every
// thread of the agent for the set-up step and again for the teardown step
// of one extra burst, writes each call to a file, and the calls are
// counted by system call and, for the failing ones, by error and by the
// shape of their arguments. ptrace stops the agent at every call, so the
// traced burst's latency and CPU mean nothing; only the counts do.

// runtimeCalls are the Go runtime's own system calls (scheduling,
// sleeping, the netpoller's waits, memory, signals), counted apart from
// the file-system and I/O calls the agent's work makes.
var runtimeCalls = map[string]bool{
	"futex": true, "nanosleep": true, "clock_nanosleep": true, "epoll_pwait": true, "epoll_pwait2": true,
	"epoll_wait": true, "madvise": true, "mmap": true, "munmap": true, "mprotect": true, "rt_sigreturn": true,
	"rt_sigprocmask": true, "rt_sigaction": true, "sigaltstack": true, "tgkill": true, "tkill": true,
	"getpid": true, "gettid": true, "sched_yield": true, "sched_getaffinity": true, "clone": true, "clone3": true,
	"exit": true, "set_robust_list": true, "rseq": true, "restart_syscall": true,
}

// unnamedCalls names the calls newer than the strace that printed them
// (strace 6.1 prints fchmodat2, Root.Chmod's, by its number).
var unnamedCalls = map[string]string{"syscall_0x1c4": "fchmodat2"}

// syscallStep is what strace counted over one step of the traced burst.
type syscallStep struct {
	Mode  string         `json:"mode"`
	Step  string         `json:"step"` // "set up" or "torn down"
	Pods  int            `json:"pods"`
	Calls map[string]int `json:"calls"` // by system call, runtime ones included
	// Failing counts the calls that returned an error, by "call ERRNO".
	Failing map[string]int `json:"failing"`
	// Signals delivered to the agent's threads (the runtime's preemption
	// signal SIGURG, mostly).
	Signals int `json:"signals"`
	// Shapes counts the failing calls by their arguments with the agent's
	// root, the pods' names, numbers and timestamps made generic: which
	// probe of which path fails.
	Shapes map[string]int `json:"failing_shapes"`
}

// totals sums the calls per pod: file-system and I/O calls, those of them
// failing (without the netpoller's EAGAIN, the normal end of a read on a
// non-blocking socket or inotify descriptor), the EAGAINs, and the
// runtime's calls and signals.
func (st syscallStep) totals() (io, failing, again, runtime float64) {
	for name, n := range st.Calls {
		if runtimeCalls[name] {
			runtime += float64(n)
		} else {
			io += float64(n)
		}
	}
	for key, n := range st.Failing {
		name, errno, _ := strings.Cut(key, " ")
		switch {
		case runtimeCalls[name]:
		case errno == "EAGAIN":
			again += float64(n)
		default:
			failing += float64(n)
		}
	}
	runtime += float64(st.Signals)
	p := float64(st.Pods)
	return io / p, failing / p, again / p, runtime / p
}

// tracer is strace attached to the agent.
type tracer struct {
	cmd    *exec.Cmd
	file   string
	stderr bytes.Buffer
	done   chan struct{}
}

// startTrace attaches strace to every thread of pid (and those it starts),
// writing to file, and returns once each thread is traced.
func startTrace(r *runner, pid int, file string) *tracer {
	t := &tracer{file: file, done: make(chan struct{})}
	// -s 256: enough of each path to tell which probe failed.
	t.cmd = exec.Command("strace", "-f", "-qq", "-s", "256", "-o", file, "-p", strconv.Itoa(pid))
	t.cmd.Stderr = &t.stderr
	if err := t.cmd.Start(); err != nil {
		r.Fatalf("strace (install it: apt-get install strace): %v", err)
	}
	go func() { _ = t.cmd.Wait(); close(t.done) }()
	r.Cleanup(t.stop)
	deadline := time.Now().Add(30 * time.Second)
	for !tracedBy(pid, t.cmd.Process.Pid) {
		select {
		case <-t.done:
			r.Fatalf("strace -p %d ended: %s", pid, t.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			r.Fatalf("strace did not attach to every thread of %d within 30 s", pid)
		}
		time.Sleep(time.Millisecond)
	}
	return t
}

// tracedBy reports whether every thread of pid is traced by tracer.
func tracedBy(pid, tracer int) bool {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	for _, task := range tasks {
		if statusField(task, "TracerPid:") != int64(tracer) {
			return false
		}
	}
	return len(tasks) > 0
}

// stop detaches strace (SIGINT) and waits for it; idempotent.
func (t *tracer) stop() {
	select {
	case <-t.done:
		return
	default:
	}
	_ = t.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-t.done:
	case <-time.After(30 * time.Second):
		_ = t.cmd.Process.Kill()
		<-t.done
	}
}

// traceStep runs step with strace attached to the agent and counts the
// calls of n pods; the raw trace is kept beside the table.
func (s *scenario) traceStep(name string, n int, step func()) syscallStep {
	file := fmt.Sprintf("%s.%s-%s.strace", s.trace, s.mode, strings.ReplaceAll(name, " ", "-"))
	t := startTrace(s.r, s.a.pid(), file)
	step()
	// What the step set going finishes under the trace too.
	s.waitQuiet("the traced step (" + name + ")")
	t.stop()
	f, err := os.Open(file)
	if err != nil {
		s.r.Fatalf("trace: %v", err)
	}
	defer f.Close()
	st, err := parseStrace(f, shaper(s.a.root, s.a.manifests))
	if err != nil {
		s.r.Fatalf("trace %s: %v", file, err)
	}
	st.Mode, st.Step, st.Pods = s.mode, name, n
	return st
}

// tracedBurst is one more burst of n pods, set up and torn down with
// strace attached: the system calls per pod, by call and by failure, in
// the report and in a table beside it.
func (s *scenario) tracedBurst(n int) {
	pods := s.objects(n)
	s.waitQuiet(fmt.Sprintf("the %d objects of the traced burst were written", 2*n))
	var lat, del []time.Duration
	var total, delTotal time.Duration
	up := s.traceStep("set up", n, func() { lat, total = createAll(s.r, s.a, s.c, pods) })
	s.rep.distribution(s.mode, fmt.Sprintf("traced burst of %d pods → each ready (meaningless: ptrace)", n), lat, total, "")
	s.reportSyscalls(up, "≤ 90")
	down := s.traceStep("torn down", n, func() { del, delTotal = deleteAll(s.r, s.a, s.c, pods) })
	s.rep.distribution(s.mode, fmt.Sprintf("traced: %d pods removed at once → each torn down (meaningless: ptrace)", n), del, delTotal, "")
	s.reportSyscalls(down, "")
	if left := mountIDs(s.r, s.a.root); len(left) > 0 {
		s.r.Errorf("%d mounts left under %s after every pod was removed", len(left), s.a.root)
	}
	s.rep.Syscalls = append(s.rep.Syscalls, up, down)
	if err := writeSyscallTable(s.trace+".syscalls.txt", s.rep.Syscalls); err != nil {
		s.r.Errorf("system-call table: %v", err)
	}
}

// reportSyscalls adds the per-pod totals of a traced step to the report.
func (s *scenario) reportSyscalls(st syscallStep, target string) {
	io, failing, again, runtime := st.totals()
	what := fmt.Sprintf("per pod %s (%d at once)", st.Step, st.Pods)
	s.rep.value(s.mode, "traced: file-system and I/O calls "+what, io, "calls", target)
	s.rep.value(s.mode, "traced: of them failing, EAGAIN aside, "+what, failing, "calls", "0")
	s.rep.value(s.mode, "traced: of them EAGAIN (the netpoller's reads) "+what, again, "calls", "")
	s.rep.value(s.mode, "traced: runtime calls and signals (ptrace-stretched) "+what, runtime, "calls", "")
}

// writeSyscallTable writes each traced step's calls per pod, the
// failures by error, and the failing calls by shape.
func writeSyscallTable(path string, steps []syscallStep) error {
	var b bytes.Buffer
	for _, st := range steps {
		io, failing, again, runtime := st.totals()
		p := float64(st.Pods)
		fmt.Fprintf(&b, "%s mode, %d pods %s at once, traced (strace -f; latency meaningless)\n", st.Mode, st.Pods, st.Step)
		fmt.Fprintf(&b, "per pod: %.1f file-system and I/O calls, %.2f of them failing (EAGAIN aside), %.2f EAGAIN; %.1f runtime calls and signals\n\n", io, failing, again, runtime)
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "file-system and I/O call\tper pod\tfailing per pod\t")
		writeCalls(tw, st, p, false)
		fmt.Fprintln(tw, "\t\t\t")
		fmt.Fprintln(tw, "runtime call\tper pod\tfailing per pod\t")
		writeCalls(tw, st, p, true)
		fmt.Fprintf(tw, "signals\t%.2f\t\t\n", float64(st.Signals)/p)
		fmt.Fprintln(tw, "\t\t\t")
		fmt.Fprintln(tw, "failing call (EAGAIN and runtime aside), by shape\tper pod\t\t")
		for _, k := range byCount(st.Shapes) {
			fmt.Fprintf(tw, "%s\t%.2f\t\t\n", k, float64(st.Shapes[k])/p)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		b.WriteString("\n")
	}
	return os.WriteFile(path, b.Bytes(), 0o644)
}

// writeCalls writes the runtime's calls or the others, most first, each
// with its failures by error.
func writeCalls(w io.Writer, st syscallStep, pods float64, runtime bool) {
	for _, name := range byCount(st.Calls) {
		if runtimeCalls[name] != runtime {
			continue
		}
		var errs []string
		for _, key := range byCount(st.Failing) {
			if call, errno, _ := strings.Cut(key, " "); call == name {
				errs = append(errs, fmt.Sprintf("%s %.2f", errno, float64(st.Failing[key])/pods))
			}
		}
		fmt.Fprintf(w, "%s\t%.2f\t%s\t\n", name, float64(st.Calls[name])/pods, strings.Join(errs, ", "))
	}
}

// byCount returns the keys of m, the largest count first.
func byCount(m map[string]int) []string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b)) })
	return keys
}
