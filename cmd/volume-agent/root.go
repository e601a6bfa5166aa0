package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// openRoot creates the root directory, resolves it and checks that it does
// not belong to another node. It records nothing: recordNode does, once
// the agent has started.
//
// The path is resolved once, here: a root reached through a symlink (a
// symlinked /var/lib is common) would otherwise be looked up in the mount
// table under a name the kernel does not use, and mounts below it would go
// unseen. Every path the agent builds starts from the resolved root.
func openRoot(dir, node string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("--root-dir: %w", err)
	}
	if err := os.MkdirAll(abs, 0o750); err != nil {
		return "", fmt.Errorf("create --root-dir: %w", err)
	}
	root, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("resolve --root-dir: %w", err)
	}
	if _, err := recordedNode(root, node); err != nil {
		return "", err
	}
	return root, nil
}

// recordNode records node in <root>/node-name, unless it is recorded
// already. A later start under another name is refused by openRoot: it
// would see none of the volumes' pods and tear them all down.
//
// It is called once the agent has started — its endpoints bound, its
// sources created — so that a start that fails (a missing --manifests
// directory, a port in use) leaves no record behind to refuse the next
// start, with the --node-name that was meant. The record is written
// atomically.
func recordNode(root, node string) error {
	recorded, err := recordedNode(root, node)
	if err != nil || recorded {
		return err
	}
	return writeFileAtomic(filepath.Join(root, "node-name"), []byte(node+"\n"), 0o644)
}

// recordedNode reports whether root records node, and refuses a root that
// records another. An empty record (left by a crash of an older version)
// counts as none.
func recordedNode(root, node string) (bool, error) {
	marker := filepath.Join(root, "node-name")
	recorded, err := os.ReadFile(marker) //nolint:gosec // G304: the marker lives in --root-dir, which only root writes
	got := strings.TrimSpace(string(recorded))
	switch {
	case errors.Is(err, os.ErrNotExist) || (err == nil && got == ""):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read %s: %w", marker, err)
	case got != node:
		return false, fmt.Errorf("--root-dir %s belongs to node %q (see %s), not %q: running as another node would tear down that node's volumes; fix --node-name, or delete %s if the node was renamed", root, got, marker, node, marker)
	}
	return true, nil
}

// writeFileAtomic replaces path with data: a reader, or a start after a
// crash, sees the old content or the new one, never a part.
func writeFileAtomic(path string, data []byte, mode os.FileMode) (retErr error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if retErr != nil {
			_ = os.Remove(f.Name())
		}
	}()
	_, err = f.Write(data)
	err = errors.Join(err, f.Chmod(mode), f.Sync(), f.Close())
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir) //nolint:gosec // G304: a directory of --root-dir, which only root writes
	if err != nil {
		return err
	}
	return errors.Join(d.Sync(), d.Close())
}
