package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// floor does, with bare system calls and nothing else, the file-system
// work the agent does for each bench pod (configMap, secret, emptyDir and
// projected volumes), n pods at once on 16 workers (the agent's
// parallelism), and then undoes it: the least any agent writing the
// kubelet's layout on this file system can spend. Per pod: the pod,
// volumes/ and four plugin and four volume directories; for the configMap
// volume a timestamped directory, a file, ..data renamed into place and
// the key's symlink (the atomic writer's minimum); for the secret and
// projected volumes a tmpfs holding the same; the emptyDir a directory.
// Teardown unmounts the tmpfs mounts and removes every entry.
//
// Compared with the agent's figures on the same root file system, it tells
// the disk's part of a burst from the agent's.
func (s *scenario) floor(n int) {
	parent := s.r.tempDirIn(s.rootParent)
	s.r.Cleanup(func() { detachUnder(parent) })
	pods := make([]string, n)
	for i := range pods {
		pods[i] = filepath.Join(parent, "pods", fmt.Sprintf("00000000-0000-0000-0000-%012d", i))
	}
	if err := os.Mkdir(filepath.Join(parent, "pods"), 0o750); err != nil {
		s.r.Fatalf("floor: %v", err)
	}
	set := runFloor(s.r, pods, floorSetUp)
	s.rep.distribution(s.mode, fmt.Sprintf("floor: the file-system work of %d pods, at once", n), set.lat, set.total, "")
	s.rep.value(s.mode, fmt.Sprintf("floor: CPU per pod set up (%d at once)", n), set.cpuPerPod, "ms", "")
	down := runFloor(s.r, pods, floorTearDown)
	s.rep.distribution(s.mode, fmt.Sprintf("floor: the file-system work of removing %d pods, at once", n), down.lat, down.total, "")
	s.rep.value(s.mode, fmt.Sprintf("floor: CPU per pod torn down (%d at once)", n), down.cpuPerPod, "ms", "")
	target := ""
	if strings.HasPrefix(fileSystem(s.rootParent), "tmpfs") {
		target = "≤ 0.4 ms on tmpfs"
	}
	s.overFloor("set up", n, set.cpuPerPod, target)
	s.overFloor("torn down", n, down.cpuPerPod, "")
}

type floorRun struct {
	lat       []time.Duration
	total     time.Duration
	cpuPerPod float64 // ms of this process's CPU (user and system) per pod
}

// runFloor calls step for every pod from 16 workers, first come first
// served, and times each pod from the start.
func runFloor(r *runner, pods []string, step func(pod string) error) floorRun {
	before, err := readUsage(os.Getpid())
	if err != nil {
		r.Fatalf("floor: %v", err)
	}
	lat := make([]time.Duration, len(pods))
	var mu sync.Mutex
	var first error
	start := time.Now()
	forEach(len(pods), func(i int) {
		err := step(pods[i])
		mu.Lock()
		defer mu.Unlock()
		lat[i] = time.Since(start)
		if err != nil && first == nil {
			first = err
		}
	})
	total := time.Since(start)
	if first != nil {
		r.Fatalf("floor: %v", first)
	}
	after, err := readUsage(os.Getpid())
	if err != nil {
		r.Fatalf("floor: %v", err)
	}
	return floorRun{lat: lat, total: total, cpuPerPod: float64(cpuBetween(before, after)) / float64(time.Millisecond) / float64(len(pods))}
}

var floorPlugins = []struct{ plugin, volume string }{
	{"kubernetes.io~configmap", "config"},
	{"kubernetes.io~secret", "secret"},
	{"kubernetes.io~empty-dir", "scratch"},
	{"kubernetes.io~projected", "proj"},
}

func floorSetUp(pod string) error {
	volumes := filepath.Join(pod, "volumes")
	for _, d := range []string{pod, volumes} {
		if err := unix.Mkdir(d, 0o750); err != nil {
			return fmt.Errorf("mkdir %s: %w", d, err)
		}
	}
	for _, p := range floorPlugins {
		dir := filepath.Join(volumes, p.plugin, p.volume)
		for _, d := range []string{filepath.Dir(dir), dir} {
			if err := unix.Mkdir(d, 0o750); err != nil {
				return fmt.Errorf("mkdir %s: %w", d, err)
			}
		}
		switch p.volume {
		case "scratch":
			continue
		case "secret", "proj":
			if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755"); err != nil {
				return fmt.Errorf("mount %s: %w", dir, err)
			}
		}
		if err := floorContent(dir, p.volume); err != nil {
			return err
		}
	}
	return nil
}

// floorContent is the atomic writer's least work for one key.
func floorContent(dir, key string) error {
	ts := filepath.Join(dir, "..2026_11_26_00_00_00.000000001")
	if err := unix.Mkdir(ts, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(ts, key), []byte("content\n"), 0o644); err != nil {
		return err
	}
	if err := unix.Symlink(filepath.Base(ts), filepath.Join(dir, "..data_tmp")); err != nil {
		return err
	}
	if err := unix.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
		return err
	}
	return unix.Symlink(filepath.Join("..data", key), filepath.Join(dir, key))
}

func floorTearDown(pod string) error {
	volumes := filepath.Join(pod, "volumes")
	for _, p := range floorPlugins {
		dir := filepath.Join(volumes, p.plugin, p.volume)
		switch p.volume {
		case "secret", "proj":
			if err := unix.Unmount(dir, unix.UMOUNT_NOFOLLOW); err != nil {
				return fmt.Errorf("unmount %s: %w", dir, err)
			}
		case "config":
			ts := filepath.Join(dir, "..2026_11_26_00_00_00.000000001")
			for _, f := range []string{filepath.Join(dir, p.volume), filepath.Join(dir, "..data"), filepath.Join(ts, p.volume)} {
				if err := unix.Unlink(f); err != nil {
					return fmt.Errorf("unlink %s: %w", f, err)
				}
			}
			if err := unix.Rmdir(ts); err != nil {
				return err
			}
		}
		for _, d := range []string{dir, filepath.Dir(dir)} {
			if err := unix.Rmdir(d); err != nil {
				return fmt.Errorf("rmdir %s: %w", d, err)
			}
		}
	}
	for _, d := range []string{volumes, pod} {
		if err := unix.Rmdir(d); err != nil {
			return fmt.Errorf("rmdir %s: %w", d, err)
		}
	}
	return nil
}
