package reconciler

import (
	"testing"
	"time"

	"go.uber.org/zap"
	zapobserver "go.uber.org/zap/zaptest/observer"
)

func TestProgressLogsUntilStopped(t *testing.T) {
	core, logs := zapobserver.New(zap.InfoLevel)
	stop := progress(zap.New(core), "setUp", 20*time.Millisecond)
	if n := logs.Len(); n != 0 {
		t.Fatalf("%d lines before the first period", n)
	}
	deadline := time.Now().Add(5 * time.Second)
	for logs.Len() < 2 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stop()
	n := logs.Len()
	if n < 2 {
		t.Fatalf("%d progress lines after %v, want at least 2", n, 5*time.Second)
	}
	e := logs.All()[0]
	if e.Message != "volume operation still running" || e.ContextMap()["operation"] != "setUp" || e.ContextMap()["elapsed"] == nil {
		t.Errorf("line = %q %v", e.Message, e.ContextMap())
	}
	time.Sleep(60 * time.Millisecond)
	if logs.Len() != n {
		t.Errorf("%d lines after stop, want %d", logs.Len(), n)
	}
}
