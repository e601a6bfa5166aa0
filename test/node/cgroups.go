package node

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"
)

// removeCgroups removes the node's cgroupRoot from every cgroup v1
// hierarchy (and the unified one), deepest first. A cgroup can only be
// removed once empty, which it is soon after the node's processes died;
// it tries for a few seconds. It removes only directories under the node's
// own root, which nothing else uses.
func (n *Node) removeCgroups() {
	var dirs []string
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range append(hierarchies, "/sys/fs/cgroup") {
		root := filepath.Join(h, n.cgroup)
		_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, path)
			}
			return nil
		})
	}
	sort.Slice(dirs, func(i, j int) bool { return len(dirs[i]) > len(dirs[j]) }) // children first
	deadline := time.Now().Add(5 * time.Second)
	for _, d := range dirs {
		for {
			err := os.Remove(d)
			if err == nil || os.IsNotExist(err) || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// createCgroupRoot creates the node's cgroupRoot in every cgroup v1
// hierarchy: the kubelet refuses a cgroupRoot that does not exist. A new
// cpuset cgroup starts with no CPUs and no memory nodes: it gets its
// parent's. With cgroup v2 alone (untested: the machines this was written
// on have v1) it creates the one directory.
func (n *Node) createCgroupRoot() error {
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		dir := filepath.Join("/sys/fs/cgroup", n.cgroup)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		return nil
	}
	hierarchies, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, h := range hierarchies {
		if filepath.Base(h) == "unified" {
			continue
		}
		dir := filepath.Join(h, n.cgroup)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("create cgroup %s: %w", dir, err)
		}
		if filepath.Base(h) != "cpuset" {
			continue
		}
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			v, err := os.ReadFile(filepath.Join(h, f))
			if err != nil {
				return fmt.Errorf("read cgroup %s: %w", f, err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), v, 0o644); err != nil {
				return fmt.Errorf("write cgroup %s: %w", f, err)
			}
		}
	}
	return nil
}
