package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

// agentOptions are the flags of an unprivileged manifest-mode agent on
// fresh directories and a free port.
func agentOptions(t *testing.T) options {
	t.Helper()
	o, err := parseFlags([]string{"--manifests", t.TempDir(), "--root-dir", filepath.Join(t.TempDir(), "root"),
		"--node-name", "node-1", "--status-addr", "127.0.0.1:0", "--unprivileged", "--in-cluster=false"})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// TestAFailedStartRecordsNoNode: a start refused for a missing manifest
// directory, or a port in use, leaves no node-name, so that the next start
// may name another node; a root recorded for another node is refused
// first, before the manifest directory is even looked at.
func TestAFailedStartRecordsNoNode(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	sockDir, err := os.MkdirTemp("", "agent-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(sockDir)
	live := filepath.Join(sockDir, "live.sock")
	served, err := net.Listen("unix", live)
	if err != nil {
		t.Fatal(err)
	}
	defer served.Close()
	ours := filepath.Join(sockDir, "ours.sock")
	for _, tc := range []struct {
		name    string
		change  func(o *options)
		before  string // node-name before the start
		wantErr string
	}{
		{"missing manifest directory", func(o *options) { o.manifests = filepath.Join(o.manifests, "missing") }, "", "manifest directory"},
		{"status port in use", func(o *options) { o.statusAddr = taken.Addr().String() }, "", "status endpoint: --status-addr " + taken.Addr().String() + ": the port is in use: another volume-agent may be running (volume-agent status --addr " + taken.Addr().String()},
		{"metrics port in use", func(o *options) { o.metricsAddr = taken.Addr().String() }, "", "metrics endpoint: --metrics-addr " + taken.Addr().String() + ": the port is in use: another volume-agent may be running"},
		{"status socket another agent serves", func(o *options) { o.statusAddr = "unix://" + live }, "", "another process is listening"},
		{"health port in use, after the status socket", func(o *options) { o.statusAddr, o.healthzAddr = "unix://"+ours, taken.Addr().String() }, "", "health endpoint: --healthz-addr " + taken.Addr().String() + ": the port is in use"},
		{"another node's root, checked first", func(o *options) { o.manifests = filepath.Join(o.manifests, "missing") }, "node-0\n",
			`belongs to node "node-0"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := agentOptions(t)
			tc.change(&o)
			marker := filepath.Join(o.rootDir, "node-name")
			if tc.before != "" {
				if err := os.MkdirAll(o.rootDir, 0o750); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(marker, []byte(tc.before), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			err := runAgent(context.Background(), o, zap.NewNop())
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("runAgent = %v, want an error with %q", err, tc.wantErr)
			}
			if got, _ := os.ReadFile(marker); string(got) != tc.before {
				t.Errorf("node-name = %q after the failed start, want %q", got, tc.before)
			}
			if _, err := os.Lstat(ours); !os.IsNotExist(err) {
				t.Errorf("the status socket is left after the failed start: %v", err)
			}
		})
	}
}

// TestAStartedAgentRecordsItsNode: node-name is there once the agent
// serves, and a start after it with another name is refused.
func TestAStartedAgentRecordsItsNode(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	o := agentOptions(t)
	o.statusAddr = addr
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runAgent(ctx, o, zap.NewNop()) }()
	marker := filepath.Join(o.rootDir, "node-name")
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			cancel()
			t.Fatalf("the agent does not answer: %v (it stopped with %v)", err, <-done)
		}
		time.Sleep(20 * time.Millisecond)
	}
	got, err := os.ReadFile(marker)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("runAgent = %v", err)
	}
	if string(got) != "node-1\n" {
		t.Fatalf("node-name = %q (%v) while the agent served, want node-1", got, err)
	}
	o.nodeName = "node-2"
	if err := runAgent(context.Background(), o, zap.NewNop()); err == nil || !strings.Contains(err.Error(), `belongs to node "node-1"`) {
		t.Errorf("a start as node-2 = %v, want it refused", err)
	}
}
