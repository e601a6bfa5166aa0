package subpath

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/volume-agent/volume-agent/internal/procpool"
)

// checkerArg makes the test binary a checker process, as the agent's
// binary is (see cmd/volume-agent's runCheckers).
const checkerArg = "subpath-test-checker"

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == checkerArg {
		err := procpool.ServeFiles(os.Stdin, os.Stdout, os.NewFile(procpool.FilesFD, "files"), AnswerOpen, FailedOpen)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	code := m.Run()
	if checkers != nil {
		checkers.Close()
	}
	os.Exit(code)
}

// checkers are checker processes of this binary, as the agent's, started
// by the first test that needs them: the Preparers of setup open their
// subPaths in them.
var (
	checkers     *procpool.Pool
	checkersOnce sync.Once
)

func checkerPool(t *testing.T) *procpool.Pool {
	t.Helper()
	checkersOnce.Do(func() {
		p, err := procpool.New(procpool.Config{Command: []string{"/proc/self/exe", checkerArg}, PassFiles: true, Stderr: os.Stderr})
		if err != nil {
			t.Fatal(err)
		}
		checkers = p
	})
	return checkers
}

// hungFiles never answers: each request waits for its context, then
// holds its release, as a pool holds it for a child stuck in the kernel.
type hungFiles struct {
	mu       sync.Mutex
	requests int      // guarded by mu
	held     []func() // guarded by mu
}

func (h *hungFiles) DoFile(ctx context.Context, _ []byte, release func()) ([]byte, *os.File, error) {
	h.mu.Lock()
	h.requests++
	h.mu.Unlock()
	<-ctx.Done()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = append(h.held, release)
	return nil, nil, fmt.Errorf("child process 1: %w: %w", procpool.ErrNoAnswer, ctx.Err())
}

func (h *hungFiles) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.requests
}

func (h *hungFiles) letGo() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, release := range h.held {
		release()
	}
	h.held = nil
}

// TestHungVolumeAskedOnce: on a volume whose storage does not answer,
// one open is asked of a checker, the volume's other subPaths are not
// tried, and no retry asks again while that open is stuck; once it ends,
// the volume is asked again.
func TestHungVolumeAskedOnce(t *testing.T) {
	p, vol := setup(t)
	h := &hungFiles{}
	p.Opener = &Opener{Files: h}
	var wants []Want
	for i := range 30 {
		wants = append(wants, Want{Container: "c", Index: i, Path: fmt.Sprintf("s%d", i)})
	}
	prepare := func() *Outcome {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		o, err := p.Prepare(ctx, uid, "data", vol, wants)
		if !errors.Is(err, errHung) {
			t.Fatalf("Prepare on hung storage: %v, want errHung", err)
		}
		return o
	}
	o := prepare()
	if len(o.Mounts) != 30 || !strings.Contains(o.Mounts[29].Error, `not tried: the volume's storage did not answer for subPath "s0"`) {
		t.Fatalf("the last subPath's outcome: %+v", o.Mounts[29])
	}
	for range 3 {
		prepare()
	}
	if n := h.count(); n != 1 {
		t.Fatalf("%d opens asked of the checkers, want 1 while the first is stuck", n)
	}
	h.letGo()
	prepare()
	if n := h.count(); n != 2 {
		t.Fatalf("%d opens asked of the checkers, want 2 once the first ended", n)
	}
	h.letGo()
}
