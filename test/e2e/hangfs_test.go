package e2e

import (
	"bytes"
	"os"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// hangFS is a FUSE file system served by the test process: a root
// directory holding one directory, "data". Once hung, every look-up,
// attribute, directory and statfs request blocks until the test ends, as
// with a network file system whose server went away: the request has been
// read and is never answered.
//
// The test process must never touch the mount while it hangs: it would
// block with the agent.
type hangFS struct {
	fuse.RawFileSystem
	dir string // the mount point

	mu       sync.Mutex
	hung     bool          // guarded by mu
	below    bool          // guarded by mu: look-ups in "data" block (hangBelowData)
	released chan struct{} // closed when the test ends
	// blocked counts the requests that blocked, by caller process and by
	// the caller's parent. Guarded by mu.
	blocked map[int]int
}

// mountHangFS mounts a hangFS on dir, which must exist. A cleanup detaches
// the mount (it may be hung: the unmount touches nothing), then answers the
// blocked requests and waits for the server to end, so that no process and
// no goroutine is left waiting on it.
func mountHangFS(t *testing.T, dir string) *hangFS {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("hung storage tests need FUSE: %v", err)
	}
	f := &hangFS{RawFileSystem: fuse.NewDefaultRawFileSystem(), dir: dir, released: make(chan struct{}), blocked: map[int]int{}}
	srv, err := fuse.NewServer(f, dir, &fuse.MountOptions{
		// No fusermount here: mount(2) directly, as root.
		DirectMountStrict: true,
		Name:              "hangfs",
		FsName:            "hangfs",
		// Plain READDIR only.
		DisableReadDirPlus: true,
	})
	if err != nil {
		t.Fatalf("mount FUSE file system on %s: %v", dir, err)
	}
	closeFuseOnExec(t)
	go srv.Serve()
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("detach FUSE mount %s: %v", dir, err)
		}
		close(f.released)
		// Every request is answered from now on, so no process can stay
		// waiting on the file system (and none can if the test process
		// dies: closing /dev/fuse aborts the connection). Once the last
		// user of the detached mount is gone, the kernel ends the
		// connection and the server's loops return.
		done := make(chan struct{})
		go func() { srv.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Errorf("FUSE server on %s still serving 10s after the mount was detached", dir)
		}
	})
	if err := srv.WaitMount(); err != nil {
		t.Fatalf("serve FUSE file system on %s: %v", dir, err)
	}
	return f
}

// closeFuseOnExec marks the test process's /dev/fuse descriptors
// close-on-exec. go-fuse's direct mount opens /dev/fuse without O_CLOEXEC,
// so every process the test starts afterwards (agents, and their children)
// would hold the server's end of the connection: if the test process died,
// the kernel would not abort the connection, and a process waiting on the
// hung file system would wait for good.
func closeFuseOnExec(t *testing.T) {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range fds {
		if link, _ := os.Readlink("/proc/self/fd/" + e.Name()); link == "/dev/fuse" {
			fd, _ := strconv.Atoi(e.Name())
			syscall.CloseOnExec(fd)
		}
	}
}

// hang makes every later request block until the test ends.
func (f *hangFS) hang() {
	f.mu.Lock()
	f.hung = true
	f.mu.Unlock()
}

// hangBelowData makes every later look-up in "data" block until the test
// ends, and nothing else: the root and "data" itself keep answering, as
// an NFS server that answers GETATTR but never LOOKUP does.
func (f *hangFS) hangBelowData() {
	f.mu.Lock()
	f.below = true
	f.mu.Unlock()
}

// blockedBy returns how many requests of process pid, or of its children,
// have blocked.
func (f *hangFS) blockedBy(pid int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.blocked[pid]
}

// wait blocks the request h while the file system hangs.
func (f *hangFS) wait(h *fuse.InHeader) {
	f.mu.Lock()
	hung := f.hung
	f.mu.Unlock()
	if hung {
		f.block(h)
	}
}

// block blocks the request h until the test ends.
func (f *hangFS) block(h *fuse.InHeader) {
	pid, parent := process(int(h.Pid))
	f.mu.Lock()
	f.blocked[pid]++
	if parent != pid {
		f.blocked[parent]++
	}
	f.mu.Unlock()
	// Interrupts (the cancel channel) are ignored on purpose: a hung
	// server answers nothing.
	<-f.released
}

// process returns the process of thread tid (FUSE reports threads), and
// that process's parent.
func process(tid int) (pid, parent int) {
	pid, parent = tid, tid
	status, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/status")
	if err != nil {
		return pid, parent
	}
	for _, line := range bytes.Split(status, []byte("\n")) {
		key, value, _ := bytes.Cut(line, []byte(":"))
		n, err := strconv.Atoi(string(bytes.TrimSpace(value)))
		switch {
		case err != nil:
		case string(key) == "Tgid":
			pid = n
		case string(key) == "PPid":
			parent = n
		}
	}
	return pid, parent
}

const (
	rootIno = fuse.FUSE_ROOT_ID
	dataIno = 2
)

func dirAttr(ino uint64, a *fuse.Attr) {
	*a = fuse.Attr{Ino: ino, Mode: syscall.S_IFDIR | 0o755, Nlink: 2}
}

// Lookup knows "data" in the root. Entries and attributes are never
// cached, so that every look-up after hang reaches the server.
func (f *hangFS) Lookup(_ <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	f.mu.Lock()
	below := f.below
	f.mu.Unlock()
	if below && h.NodeId == dataIno {
		f.block(h)
	}
	f.wait(h)
	if h.NodeId != rootIno || name != "data" {
		return fuse.ENOENT
	}
	out.NodeId = dataIno
	dirAttr(dataIno, &out.Attr)
	return fuse.OK
}

func (f *hangFS) GetAttr(_ <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	f.wait(&in.InHeader)
	dirAttr(in.NodeId, &out.Attr)
	return fuse.OK
}

func (f *hangFS) Access(_ <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	f.wait(&in.InHeader)
	return fuse.OK
}

func (f *hangFS) OpenDir(_ <-chan struct{}, in *fuse.OpenIn, _ *fuse.OpenOut) fuse.Status {
	f.wait(&in.InHeader)
	return fuse.OK
}

func (f *hangFS) ReadDir(_ <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	f.wait(&in.InHeader)
	if in.NodeId == rootIno && in.Offset == 0 {
		out.AddDirEntry(fuse.DirEntry{Name: "data", Ino: dataIno, Mode: syscall.S_IFDIR, Off: 1})
	}
	return fuse.OK
}

func (f *hangFS) StatFs(_ <-chan struct{}, h *fuse.InHeader, _ *fuse.StatfsOut) fuse.Status {
	f.wait(h)
	return fuse.OK
}
