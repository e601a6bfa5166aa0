package btrfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeBtrfs puts a btrfs(8) on PATH that appends its arguments to a log,
// prints stdout, prints stderr on standard error and exits with code (a
// shell script, so nothing of the host's btrfs-progs runs). It returns
// the log's path.
func fakeBtrfs(t *testing.T, stdout, stderr string, code int) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range map[string]string{"stdout": stdout, "stderr": stderr} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	script := fmt.Sprintf("#!/bin/sh\necho \"$*\" >>%[1]s/calls\ncat %[1]s/stdout\ncat %[1]s/stderr >&2\nexit %[2]d\n", dir, code)
	if err := os.WriteFile(filepath.Join(dir, "btrfs"), []byte(script), 0o700); err != nil { //nolint:gosec // G306: the fake must be executable
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return filepath.Join(dir, "calls")
}

func calls(t *testing.T, log string) string {
	t.Helper()
	b, err := os.ReadFile(log) //nolint:gosec // G304: the test's own file
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestRunFailures: what btrfs(8) said sorts its failures into the
// sentinels; a qgroup already gone is no failure to destroy; the command
// line and what it said are in the error.
func TestRunFailures(t *testing.T) {
	ctx := t.Context()
	fakeBtrfs(t, "", "ERROR: can't list qgroups: quotas not enabled\n", 1)
	_, err := Tool{}.HasQgroup(ctx, "/mnt", 256)
	var te *Error
	if !errors.Is(err, ErrQuotasOff) || errors.Is(err, ErrNotEmpty) || !errors.As(err, &te) {
		t.Fatalf("quotas off: %v; want ErrQuotasOff", err)
	}
	if want := "btrfs qgroup show --raw /mnt: exit status 1: ERROR: can't list qgroups: quotas not enabled"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}

	fakeBtrfs(t, "", "ERROR: Could not destroy subvolume/snapshot: Directory not empty\n", 1)
	if err := (Tool{}).DeleteSubvolume(ctx, "/mnt/vol"); !errors.Is(err, ErrNotEmpty) || errors.Is(err, ErrQuotasOff) {
		t.Errorf("nested subvolume: %v; want ErrNotEmpty", err)
	}

	log := fakeBtrfs(t, "", "ERROR: unable to destroy quota group: No such file or directory\n", 1)
	if err := (Tool{}).DestroyQgroup(ctx, "/mnt", 257); err != nil {
		t.Errorf("destroy a qgroup that is gone: %v", err)
	}
	if got := calls(t, log); got != "qgroup destroy 0/257 /mnt" {
		t.Errorf("ran btrfs %s", got)
	}

	fakeBtrfs(t, "", "ERROR: cannot access '/mnt/vol': No such file or directory\n", 1)
	if err := (Tool{}).SetLimit(ctx, "/mnt/vol", 1<<20); err == nil {
		t.Error("a failed qgroup limit returned no error")
	}
}

// TestRunOutput: the methods' argv and how their output is read.
func TestRunOutput(t *testing.T) {
	ctx := t.Context()
	log := fakeBtrfs(t, "257\n", "", 0)
	if id, err := (Tool{}).SubvolumeID(ctx, "/mnt/vol"); err != nil || id != 257 {
		t.Errorf("SubvolumeID = %d, %v; want 257", id, err)
	}
	if err := (Tool{}).SetLimit(ctx, "/mnt/vol", 10<<20); err != nil {
		t.Fatal(err)
	}
	if err := (Tool{}).WaitDropped(ctx, "/mnt", 257); err != nil {
		t.Fatal(err)
	}
	want := "inspect-internal rootid /mnt/vol\nqgroup limit 10485760 /mnt/vol\nsubvolume sync /mnt 257"
	if got := calls(t, log); got != want {
		t.Errorf("ran\n%s\nwant\n%s", got, want)
	}

	fakeBtrfs(t, "not a number", "", 0)
	if _, err := (Tool{}).SubvolumeID(ctx, "/mnt/vol"); err == nil || !strings.Contains(err.Error(), "subvolume ID of /mnt/vol") {
		t.Errorf("SubvolumeID of garbage: %v", err)
	}

	log = fakeBtrfs(t, showWithPath, "", 0)
	if q, err := (Tool{}).QgroupOf(ctx, "/mnt/vol", 256); err != nil || q.Referenced != 10469376 || q.Limit != 10485760 {
		t.Errorf("QgroupOf = %+v, %v", q, err)
	}
	for id, want := range map[uint64]bool{256: true, 5: true, 25: false, 0: false} {
		if ok, err := (Tool{}).HasQgroup(ctx, "/mnt", id); err != nil || ok != want {
			t.Errorf("HasQgroup(0/%d) = %v, %v; want %v", id, ok, err, want)
		}
	}
	if got := calls(t, log); !strings.HasPrefix(got, "qgroup show --raw -re -f /mnt/vol\nqgroup show --raw /mnt\n") {
		t.Errorf("ran\n%s", got)
	}
}

// TestRelativePathRefused: no relative path (which btrfs(8) could read as
// an option) reaches btrfs(8).
func TestRelativePathRefused(t *testing.T) {
	ctx := t.Context()
	log := fakeBtrfs(t, "", "", 0)
	tool := Tool{}
	for name, call := range map[string]func() error{
		"QuotasOn":        func() error { _, err := tool.QuotasOn(ctx, "-x"); return err },
		"EnableQuotas":    func() error { return tool.EnableQuotas(ctx, "mnt") },
		"CreateSubvolume": func() error { return tool.CreateSubvolume(ctx, "--help") },
		"DeleteSubvolume": func() error { return tool.DeleteSubvolume(ctx, "vol") },
		"SubvolumeID":     func() error { _, err := tool.SubvolumeID(ctx, "vol"); return err },
		"SetLimit":        func() error { return tool.SetLimit(ctx, "vol", 1) },
		"Sync":            func() error { return tool.Sync(ctx, ".") },
		"WaitDropped":     func() error { return tool.WaitDropped(ctx, "", 257) },
		"QgroupOf":        func() error { _, err := tool.QgroupOf(ctx, "vol", 257); return err },
		"HasQgroup":       func() error { _, err := tool.HasQgroup(ctx, "vol", 257); return err },
		"DestroyQgroup":   func() error { return tool.DestroyQgroup(ctx, "vol", 257) },
	} {
		if err := call(); err == nil || !strings.Contains(err.Error(), "is not absolute") {
			t.Errorf("%s with a relative path: %v", name, err)
		}
	}
	if got := calls(t, log); got != "" {
		t.Errorf("btrfs(8) ran: %s", got)
	}
}

// TestRunDeadline: a btrfs(8) that does not finish is given up on at the
// timeout, and the hook is called before and after the run.
func TestRunDeadline(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "btrfs"), []byte("#!/bin/sh\nexec sleep 10\n"), 0o700); err != nil { //nolint:gosec // G306: the fake must be executable
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	hooked := 0
	start := time.Now()
	_, err := Tool{Timeout: 200 * time.Millisecond, Hook: func() { hooked++ }}.Run(t.Context(), "filesystem", "sync", "/mnt")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a hung btrfs(8): %v, want the deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("gave up after %v", d)
	}
	if hooked != 2 {
		t.Errorf("hook called %d times, want 2 (before and after)", hooked)
	}
}
