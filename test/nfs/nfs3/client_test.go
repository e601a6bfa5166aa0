package nfs3_test

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	nfstest "github.com/volume-agent/volume-agent/test/nfs"
	"github.com/volume-agent/volume-agent/test/nfs/nfs3"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// mounted returns a client of a fresh server and the export's root handle.
func mounted(t *testing.T) (*nfstest.Server, *nfs3.Client, []byte) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := nfstest.Start(t, dir)
	c := nfs3.NewClient(srv.Addr(), 200*time.Millisecond)
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	root, err := c.Mount(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	return srv, c, root
}

func TestCallEndsAtItsDeadlineWhileTheServerIsDown(t *testing.T) {
	srv, c, root := mounted(t)
	srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.GetAttr(ctx, root)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("GETATTR of a stopped server: %v, want the context's deadline", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("GETATTR returned after %v, long after its 500ms deadline", took)
	}
}

func TestCallReconnectsWhenTheServerComesBack(t *testing.T) {
	srv, c, root := mounted(t)
	srv.Stop()
	done := make(chan error, 1)
	go func() {
		_, _, err := c.Lookup(context.Background(), root, "f")
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	srv.Restart() // with the same handles
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("LOOKUP once the server came back: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("LOOKUP still waiting 10s after the server came back")
	}
}

func TestStatusErrorsMapToErrnos(t *testing.T) {
	_, c, root := mounted(t)
	_, _, err := c.Lookup(context.Background(), root, "missing")
	var status nfs3.Error
	if !errors.As(err, &status) || status.Errno() != syscall.ENOENT {
		t.Errorf("LOOKUP of a missing name: %v, want NFS3ERR_NOENT (ENOENT)", err)
	}
}

func TestSilentServerIsAskedAgainOnANewConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			// Read requests, never answer, until the client gives
			// the connection up.
			go func() { _, _ = io.Copy(io.Discard, conn); conn.Close() }()
		}
	}()
	c := nfs3.NewClient(ln.Addr().String(), 100*time.Millisecond)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 1*time.Second)
	defer cancel()
	if _, err := c.GetAttr(ctx, []byte("fh")); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("GETATTR of a silent server: %v, want the context's deadline", err)
	}
	// Waits of 100, 200, 300 ms: a new connection after each.
	if n := accepted.Load(); n < 2 {
		t.Errorf("%d connection(s) to a server that never answers, want a new one after each timeout", n)
	}
}
