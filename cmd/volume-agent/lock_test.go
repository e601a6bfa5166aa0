package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestLockDirRefusesASecondHolderNamingTheFirst(t *testing.T) {
	defer func(d time.Duration) { lockWait = d }(lockWait)
	lockWait = 200 * time.Millisecond
	dir := t.TempDir()
	first, err := lockDir("--root-dir", dir, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	// flock(2) locks belong to open file descriptions: a second open in
	// the same process conflicts as another agent's would.
	_, err = lockDir("--root-dir", dir, zap.NewNop())
	want := fmt.Sprintf("--root-dir %s is in use by process %d", dir, os.Getpid())
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("second lock: %v, want an error containing %q", err, want)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := lockDir("--root-dir", dir, zap.NewNop())
	if err != nil {
		t.Fatalf("lock after the holder let go: %v", err)
	}
	_ = again.Close()
}

func TestFlockHolder(t *testing.T) {
	locks := "1: POSIX  ADVISORY  WRITE 77 fe:00:42 0 EOF\n" +
		"2: FLOCK  ADVISORY  WRITE 5441 fe:00:10002764 0 EOF\n" +
		"3: FLOCK  ADVISORY  WRITE 99 103:02:42 0 EOF\n"
	for _, tc := range []struct {
		major, minor uint32
		ino          uint64
		want         int
	}{
		{0xfe, 0, 10002764, 5441},
		{0x103, 2, 42, 99},
		{0xfe, 0, 42, 0}, // a POSIX lock is not a flock
		{1, 1, 1, 0},
	} {
		if got := flockHolder(bufio.NewScanner(strings.NewReader(locks)), tc.major, tc.minor, tc.ino); got != tc.want {
			t.Errorf("flockHolder(%x:%x:%d) = %d, want %d", tc.major, tc.minor, tc.ino, got, tc.want)
		}
	}
}
