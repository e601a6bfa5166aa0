package main

import (
	"errors"
	"testing"

	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"
)

// TestKlogLinesAreOneLineWarnings: mount-utils' klog error for a failed
// mount, with mount(8)'s command and output on lines of their own, is
// written as one line at warn level; other levels keep theirs.
func TestKlogLinesAreOneLineWarnings(t *testing.T) {
	core, logs := zapobserver.New(zapcore.DebugLevel)
	l := zapr.NewLogger(klogLogger(zap.New(core)))
	l.Error(errors.New("exit status 32"), "Mount failed: exit status 32\nMounting command: mount\nMounting arguments: -t nfs 10.0.0.1:/x /dir\nOutput: mount.nfs: access denied\n")
	l.Info("Detected OS without systemd")
	l.V(1).Info("Unmounting\n/dir")

	got := logs.All()
	if len(got) != 3 {
		t.Fatalf("%d entries, want 3: %v", len(got), got)
	}
	want := []struct {
		level zapcore.Level
		msg   string
	}{
		{zapcore.WarnLevel, "Mount failed: exit status 32; Mounting command: mount; Mounting arguments: -t nfs 10.0.0.1:/x /dir; Output: mount.nfs: access denied"},
		{zapcore.InfoLevel, "Detected OS without systemd"},
		{zapcore.DebugLevel, "Unmounting; /dir"},
	}
	for i, w := range want {
		if got[i].Level != w.level || got[i].Message != w.msg || got[i].LoggerName != "klog" {
			t.Errorf("entry %d = %s %s %q, want %s klog %q", i, got[i].Level, got[i].LoggerName, got[i].Message, w.level, w.msg)
		}
	}
	if got[0].ContextMap()["error"] != "exit status 32" {
		t.Errorf("the error field was lost: %v", got[0].ContextMap())
	}

	// Demoted entries obey the level: at error level, klog's errors are
	// not written.
	quiet, none := zapobserver.New(zapcore.ErrorLevel)
	zapr.NewLogger(klogLogger(zap.New(quiet))).Error(errors.New("x"), "watch failed")
	if none.Len() != 0 {
		t.Errorf("at --log-level error, a demoted klog error was written: %v", none.All())
	}
}
