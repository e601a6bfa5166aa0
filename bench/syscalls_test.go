package main

import (
	"encoding/json"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseStrace counts a call split between two lines once, failing
// calls by error and by shape, signals apart, and neither exits nor calls
// cut short by the detach.
func TestParseStrace(t *testing.T) {
	trace := `101 openat(AT_FDCWD, "/root/pods/p3-17/volumes", O_RDONLY|O_CLOEXEC) = 3
101 newfstatat(AT_FDCWD, "/root/pods/p3-17/volumes/kubernetes.io~configmap", 0xc000123, 0) = -1 ENOENT (No such file or directory)
102 futex(0x1234, FUTEX_WAIT_PRIVATE, 0, NULL <unfinished ...>
101 epoll_ctl(4, EPOLL_CTL_ADD, 7, {events=EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET, data={u32=1, u64=1}}) = -1 EPERM (Operation not permitted)
101 read(5, 0xc000456, 4096) = -1 EAGAIN (Resource temporarily unavailable)
101 fcntl(3, F_GETFL) = 0x8000 (flags O_RDONLY|O_LARGEFILE)
103 readlinkat(AT_FDCWD, "/root/pods/p3-18/volumes/kubernetes.io~secret/secret/..data", <unfinished ...>
102 <... futex resumed>) = 0
103 <... readlinkat resumed>0xc000789, 128) = -1 ENOENT (No such file or directory)
101 --- SIGURG {si_signo=SIGURG, si_code=SI_TKILL, si_pid=100, si_uid=0} ---
101 rt_sigreturn({mask=[]}) = 1
104 mkdirat(AT_FDCWD, "/root/pods/p3-19/volumes/kubernetes.io~configmap/config/..2026_11_28_23_00_00.123456789", 0755) = 0
105 +++ exited with 0 +++
106 epoll_pwait(4,  <unfinished ...>
`
	st, err := parseStrace(strings.NewReader(trace), shaper("/root", ""))
	if err != nil {
		t.Fatal(err)
	}
	wantCalls := map[string]int{"openat": 1, "newfstatat": 1, "futex": 1, "epoll_ctl": 1, "read": 1, "fcntl": 1, "readlinkat": 1, "rt_sigreturn": 1, "mkdirat": 1}
	if !maps.Equal(st.Calls, wantCalls) {
		t.Errorf("calls %v, want %v", st.Calls, wantCalls)
	}
	wantFailing := map[string]int{"newfstatat ENOENT": 1, "epoll_ctl EPERM": 1, "read EAGAIN": 1, "readlinkat ENOENT": 1}
	if !maps.Equal(st.Failing, wantFailing) {
		t.Errorf("failing %v, want %v", st.Failing, wantFailing)
	}
	if st.Signals != 1 {
		t.Errorf("signals %d, want 1", st.Signals)
	}
	wantShape := `ENOENT readlinkat(AT_FDCWD, "<root>/pods/<uid>/volumes/kubernetes.io~secret/secret/..data", 0x…, N)`
	if st.Shapes[wantShape] != 1 || len(st.Shapes) != 3 {
		t.Errorf("shapes %v, want 3 with %q", st.Shapes, wantShape)
	}
	st.Pods = 2
	io, failing, again, runtime := st.totals()
	// 6 calls of the file system and I/O, 3 failing of which 1 EAGAIN;
	// futex and rt_sigreturn and the signal are the runtime's.
	if io != 3.5 || failing != 1.5 || again != 0.5 || runtime != 1.5 {
		t.Errorf("per pod: io %v, failing %v, EAGAIN %v, runtime %v; want 3.5, 1.5, 0.5, 1.5", io, failing, again, runtime)
	}
}

// TestTinySyscallsRun traces a tiny burst: the report and the table beside
// it count the calls of the set-ups and teardowns, among them the two
// tmpfs mounts and unmounts of each pod (its secret and projected volumes).
func TestTinySyscallsRun(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the benchmarks need root: the agent mounts tmpfs")
	}
	out := filepath.Join(t.TempDir(), "bench.json")
	o, err := parseFlags([]string{"-size", "tiny", "-modes", "manifest", "-scenario", "bursts", "-rounds", "1", "-syscalls", "-out", out})
	if err != nil {
		t.Skip(err) // no strace
	}
	if _, err := run(o, io.Discard, t.Logf); err != nil {
		t.Fatalf("run: %v", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Syscalls) != 2 {
		t.Fatalf("%d traced steps, want set up and torn down", len(rep.Syscalls))
	}
	up, down := rep.Syscalls[0], rep.Syscalls[1]
	if up.Step != "set up" || up.Pods != 4 || up.Calls["mount"] < 2*up.Pods {
		t.Errorf("set-up step %s of %d pods: %d mounts, want at least 2 a pod; calls %v", up.Step, up.Pods, up.Calls["mount"], up.Calls)
	}
	if down.Step != "torn down" || down.Calls["umount2"] < 2*down.Pods {
		t.Errorf("teardown step %s: %d unmounts, want at least 2 a pod; calls %v", down.Step, down.Calls["umount2"], down.Calls)
	}
	table, err := os.ReadFile(strings.TrimSuffix(out, ".json") + ".syscalls.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"4 pods set up at once", "4 pods torn down at once", "\nmount ", "\numount2 ", "runtime call"} {
		if !strings.Contains(string(table), want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	traced := 0
	for _, f := range rep.Figures {
		if strings.HasPrefix(f.Name, "traced") && strings.Contains(f.Name, "meaningless") {
			traced++
		}
	}
	if traced != 2 {
		t.Errorf("%d traced latency figures marked meaningless, want 2", traced)
	}
}
