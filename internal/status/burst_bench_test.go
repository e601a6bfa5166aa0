package status

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/types"

	"github.com/volume-agent/volume-agent/internal/asw"
	"github.com/volume-agent/volume-agent/internal/dsw"
)

// BenchmarkBurstLongPolls replays what the status endpoint does in a burst
// of pods started at once, each long-polled by its runtime (the bench's
// waitReady): every pod's GET /v1/pods/UID?wait=2m is waiting, over a
// real loopback connection, before the agent learns of the pod; then the
// pods are set up one after the other, each in the six changes of a
// set-up (SetPod, NotePod, four volumes Mounted), the last of which makes
// it ready and its poll answers 200.
//
// Each change is applied once the request it woke waits again, so that
// every run makes the same wake-ups: the allocations per pod are then a
// count, not a sample. polls=0 makes the same changes with nobody
// waiting (what the worlds and Notify cost alone); the difference is the
// long polls'. conns=kept reuses each client's connection from burst to
// burst; conns=new dials one per poll, as after the endpoint's idle
// timeout (the client's dial is then counted too).
func BenchmarkBurstLongPolls(b *testing.B) {
	const pods = 110
	for _, tc := range []struct {
		polls   bool
		newConn bool
		name    string
	}{{false, false, "polls=0"}, {true, false, "polls=110/conns=kept"}, {true, true, "polls=110/conns=new"}} {
		b.Run(tc.name, func(b *testing.B) {
			bb := newBurstBench(b, pods, tc.newConn)
			defer bb.close()
			if tc.polls {
				bb.burst(b, true) // opens the connections kept
				bb.forget()
			}
			var before, after runtime.MemStats
			var mallocs, allocated uint64
			b.ResetTimer()
			for b.Loop() {
				runtime.ReadMemStats(&before)
				bb.burst(b, tc.polls)
				runtime.ReadMemStats(&after)
				mallocs += after.Mallocs - before.Mallocs
				allocated += after.TotalAlloc - before.TotalAlloc
				b.StopTimer()
				bb.forget()
				b.StartTimer()
			}
			b.ReportMetric(float64(mallocs)/float64(b.N*pods), "allocs/pod")
			b.ReportMetric(float64(allocated)/float64(b.N*pods), "B/pod")
		})
	}
}

// burstBench is a server over worlds that notify it, served on a
// loopback port, and a raw client per pod.
type burstBench struct {
	srv     *Server
	worlds  Worlds
	pods    []dsw.Pod
	steps   [][]func() // by pod: the changes of its set-up
	clients []*rawPoll
	stop    context.CancelFunc
	served  chan error
}

func newBurstBench(b *testing.B, n int, newConn bool) *burstBench {
	bb := &burstBench{served: make(chan error, 1)}
	bb.worlds = Worlds{Desired: dsw.New(func() { bb.srv.Notify() }), Actual: asw.New(func() { bb.srv.Notify() })}
	bb.srv = New(Config{Worlds: bb.worlds, Logger: zap.NewNop()})
	bb.srv.Notify() // the first Take says "all": not part of a burst
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	lim := DefaultLimits
	lim.IdleTimeout = time.Hour // conns=kept: never closed between bursts
	ctx, stop := context.WithCancel(context.Background())
	bb.stop = stop
	go func() { bb.served <- serveWithin(ctx, ln, bb.srv.Handler(), bb.srv.stop, lim, bb.srv.connState) }()
	for i := range n {
		uid := fmt.Sprintf("0b5e1c1e-7d2a-4c3b-9a8f-%012d", i)
		p := dsw.Pod{UID: types.UID(uid), Namespace: "bench", Name: fmt.Sprintf("burst-%d", i)}
		for _, name := range []string{"config", "data", "kube-api-access", "secret"} {
			p.Volumes = append(p.Volumes, wanted(name, cm, "1"))
		}
		bb.pods = append(bb.pods, p)
		bb.steps = append(bb.steps, bb.setUp(p))
		c := &rawPoll{addr: ln.Addr().String(), newConn: newConn, ask: make(chan struct{}), answered: make(chan error),
			req: []byte("GET /v1/pods/" + uid + "?wait=2m0s HTTP/1.1\r\nHost: " + ln.Addr().String() + "\r\nUser-Agent: Go-http-client/1.1\r\n\r\n")}
		bb.clients = append(bb.clients, c)
		go c.run()
	}
	return bb
}

// burst starts a poll of every pod (when polls), then sets the pods up one
// by one.
func (bb *burstBench) burst(b *testing.B, polls bool) {
	if polls {
		for _, c := range bb.clients {
			c.ask <- struct{}{}
		}
		for _, p := range bb.pods {
			bb.waitForPoll(p.UID)
		}
	}
	for i, p := range bb.pods {
		steps := bb.steps[i]
		for j, step := range steps {
			step()
			switch {
			case !polls:
			case j < len(steps)-1:
				bb.waitForPoll(p.UID)
			default:
				if err := <-bb.clients[i].answered; err != nil {
					b.Fatalf("pod %s: %v", p.UID, err)
				}
			}
		}
	}
}

// setUp returns the changes of a set-up of p: what the populator and the
// operations record.
func (bb *burstBench) setUp(p dsw.Pod) []func() {
	steps := []func(){
		func() { bb.worlds.Desired.SetPod(p) },
		func() { bb.worlds.Actual.NotePod(p.UID, p.Namespace, p.Name, "manifests") },
	}
	for _, v := range p.Volumes {
		dir := "/var/lib/volume-agent/pods/" + string(p.UID) + "/volumes/kubernetes.io~configmap/" + v.Name
		mounted := asw.Volume{PodUID: p.UID, Name: v.Name, Plugin: cm, Dir: dir, Path: dir, State: asw.Mounted, Version: "1"}
		steps = append(steps, func() { bb.worlds.Actual.Set(mounted) })
	}
	return steps
}

// forget removes every pod, as their teardown would, so that the next
// burst starts from nothing.
func (bb *burstBench) forget() {
	for _, p := range bb.pods {
		bb.worlds.Desired.DeletePod(p.UID)
		for _, v := range p.Volumes {
			bb.worlds.Actual.Delete(dsw.Key{PodUID: p.UID, Volume: v.Name})
		}
		bb.worlds.Actual.RemovePodDir(p.UID)
		bb.worlds.Desired.Forget(p.UID)
	}
	bb.srv.cache.pods() // the cache forgets them
}

// waitForPoll returns once a request waits for the next change of pod uid.
func (bb *burstBench) waitForPoll(uid types.UID) {
	for bb.srv.waitingFor(string(uid)) == 0 {
		runtime.Gosched()
	}
}

// waitingFor is how many requests wait for the next change of pod uid:
// registered, with no change they have not taken yet.
func (s *Server) waitingFor(uid string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for p := s.waiters[uid]; p != nil; p = p.next {
		if len(p.changed) == 0 {
			n++
		}
	}
	return n
}

func (bb *burstBench) close() {
	for _, c := range bb.clients {
		close(c.ask)
	}
	bb.stop()
	<-bb.served
}

// rawPoll is a client that allocates next to nothing, so that the
// allocations counted are the server's: it writes a prepared request and
// reads the answer's status line, headers and body.
type rawPoll struct {
	addr     string
	newConn  bool
	req      []byte
	ask      chan struct{}
	answered chan error
	conn     net.Conn
	r        *bufio.Reader
}

func (c *rawPoll) run() {
	defer func() {
		if c.conn != nil {
			c.conn.Close()
		}
	}()
	for range c.ask {
		c.answered <- c.poll()
	}
}

func (c *rawPoll) poll() error {
	if c.conn == nil {
		conn, err := net.Dial("tcp", c.addr)
		if err != nil {
			return err
		}
		c.conn = conn
		if c.r == nil {
			c.r = bufio.NewReaderSize(conn, 8<<10)
		}
		c.r.Reset(conn)
	}
	if c.newConn {
		defer func() { c.conn.Close(); c.conn = nil }()
	}
	if _, err := c.conn.Write(c.req); err != nil {
		return err
	}
	return readAnswer(c.r)
}

// readAnswer reads an answer of status 200 whose body is framed by its
// Content-Length or chunked.
func readAnswer(r *bufio.Reader) error {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return err
	}
	if !bytes.HasPrefix(line, []byte("HTTP/1.1 200 ")) {
		return fmt.Errorf("answer %q", line)
	}
	length, chunked := -1, false
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		if len(line) <= 2 {
			break
		}
		if v, ok := bytes.CutPrefix(line, []byte("Content-Length: ")); ok {
			length = digits(v)
		}
		if bytes.Equal(line, []byte("Transfer-Encoding: chunked\r\n")) {
			chunked = true
		}
	}
	if !chunked {
		_, err := r.Discard(length)
		return err
	}
	for {
		line, err := r.ReadSlice('\n')
		if err != nil {
			return err
		}
		n := hex(bytes.TrimSpace(line))
		if _, err := r.Discard(n + 2); err != nil || n == 0 {
			return err
		}
	}
}

func hex(b []byte) int {
	n := 0
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			n = n*16 + int(c-'0')
		case c >= 'a' && c <= 'f':
			n = n*16 + int(c-'a') + 10
		}
	}
	return n
}

func digits(b []byte) int {
	n := 0
	for _, c := range b {
		if c >= '0' && c <= '9' {
			n = n*10 + int(c-'0')
		}
	}
	return n
}
