package main

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"github.com/volume-agent/volume-agent/internal/mount"
)

const (
	noSwapAreas = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
	oneSwapArea = noSwapAreas + "/swapfile                               file\t\t1048572\t\t0\t\t-2\n"
)

// TestReportNoSwap: noswap is used only when the probe mounted with it; a
// kernel without it is a warning only where swap is (or may be) on.
func TestReportNoSwap(t *testing.T) {
	for _, tc := range []struct {
		name      string
		probe     error
		swaps     string // "": no such file
		want      bool
		wantLevel zapcore.Level
		wantMsg   string
	}{
		{"supported", nil, oneSwapArea, true, zapcore.InfoLevel, "memory-backed volumes are mounted with noswap"},
		{"unsupported, no swap", mount.ErrNoSwapUnsupported, noSwapAreas, false, zapcore.InfoLevel,
			"memory-backed volumes are mounted without noswap, which this kernel lacks; the node has no swap"},
		{"unsupported, swap on", mount.ErrNoSwapUnsupported, oneSwapArea, false, zapcore.WarnLevel,
			"memory-backed volumes may be written to swap: the kernel does not support noswap for tmpfs"},
		{"unsupported, swap unknown", mount.ErrNoSwapUnsupported, "", false, zapcore.WarnLevel,
			"memory-backed volumes may be written to swap: the kernel does not support noswap for tmpfs"},
		{"probe failed", errors.New("mkdir /tmp/x: read-only file system"), noSwapAreas, false, zapcore.WarnLevel,
			"memory-backed volumes are mounted without noswap: the probe for it failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			swaps := filepath.Join(t.TempDir(), "swaps")
			if tc.swaps != "" {
				if err := os.WriteFile(swaps, []byte(tc.swaps), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			core, logs := zapobserver.New(zapcore.DebugLevel)
			if got := reportNoSwap(tc.probe, swaps, zap.New(core)); got != tc.want {
				t.Errorf("reportNoSwap = %v, want %v", got, tc.want)
			}
			entries := logs.All()
			if len(entries) != 1 || entries[0].Level != tc.wantLevel || entries[0].Message != tc.wantMsg {
				t.Fatalf("logged %+v, want one %s line %q", entries, tc.wantLevel, tc.wantMsg)
			}
		})
	}
}

func TestProbeNoSwapUnprivileged(t *testing.T) {
	core, logs := zapobserver.New(zapcore.DebugLevel)
	if probeNoSwap(mount.Unprivileged{}, zap.New(core)) {
		t.Error("an agent that mounts nothing uses noswap")
	}
	if logs.Len() != 0 {
		t.Errorf("logged %+v; the unprivileged warning says it all", logs.All())
	}
	if mountedNoSwap(mount.Unprivileged{}) != nil {
		t.Error("an agent that mounts nothing reads the mount table for noswap")
	}
	if mountedReadOnly(mount.Unprivileged{}) != nil {
		t.Error("an agent that mounts nothing reads the mount table for read-only mounts")
	}
}
