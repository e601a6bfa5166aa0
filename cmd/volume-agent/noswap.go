package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.uber.org/zap"

	"github.com/volume-agent/volume-agent/internal/mount"
)

// probeNoSwap finds out, once at start, whether memory-backed volumes can
// be mounted with noswap, and logs the answer. The kubelet adds noswap
// only on nodes with swap on; the agent adds it wherever the kernel
// supports it, which costs nothing and holds if swap is turned on later.
// An agent that mounts nothing (--unprivileged) does not probe.
func probeNoSwap(mounter mount.Mounter, log *zap.Logger) bool {
	if !mount.Privileged(mounter) {
		return false
	}
	return reportNoSwap(mount.ProbeNoSwap(""), "/proc/swaps", log)
}

// reportNoSwap logs the outcome err of the probe for noswap, at warn when
// the kernel lacks it and the node has swap on (or may have: swaps, the
// kernel's list of swap areas, cannot be read), and reports whether
// noswap is to be used.
func reportNoSwap(err error, swaps string, log *zap.Logger) bool {
	if err == nil {
		log.Info("memory-backed volumes are mounted with noswap")
		return true
	}
	swapOn, swapErr := swapIsOn(swaps)
	switch {
	case errors.Is(err, mount.ErrNoSwapUnsupported) && swapErr == nil && !swapOn:
		log.Info("memory-backed volumes are mounted without noswap, which this kernel lacks; the node has no swap", zap.Error(err))
	case errors.Is(err, mount.ErrNoSwapUnsupported):
		log.Warn("memory-backed volumes may be written to swap: the kernel does not support noswap for tmpfs", zap.Error(err), zap.Bool("swapOn", swapOn))
	default:
		log.Warn("memory-backed volumes are mounted without noswap: the probe for it failed", zap.Error(err))
	}
	return false
}

// swapIsOn reports whether the node has swap on: whether swaps (the
// kernel's /proc/swaps) lists any swap area below its header line.
func swapIsOn(swaps string) (bool, error) {
	b, err := os.ReadFile(swaps) //nolint:gosec // G304: /proc/swaps, or a test's file
	if err != nil {
		return true, fmt.Errorf("read swap areas: %w", err) // unknown: assume the worst
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return len(lines) > 1, nil
}

// mountedNoSwap is how the reconciler learns at start whether the tmpfs of
// the volumes it finds on disk have noswap; nil for an agent that mounts
// nothing.
func mountedNoSwap(mounter mount.Mounter) func(context.Context, string) (map[string]bool, error) {
	if !mount.Privileged(mounter) {
		return nil
	}
	return mount.NoSwapUnder
}
