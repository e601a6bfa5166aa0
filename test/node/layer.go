package node

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// layer collects the files of one image layer, copied from the host with
// the symbolic links on their way, so that an image built on a merged-/usr
// host (/sbin -> usr/sbin) has the same layout as the host.
type layer struct {
	entries map[string]*tar.Header // by path without leading slash
	content map[string]string      // regular file path -> host file to read
}

func newLayer() *layer {
	return &layer{entries: map[string]*tar.Header{}, content: map[string]string{}}
}

// dir adds a directory (and its parents).
func (l *layer) dir(path string, mode int64) {
	name := strings.TrimPrefix(filepath.Clean(path), "/")
	if name == "" || name == "." {
		return
	}
	l.dir(filepath.Dir("/"+name), 0o755)
	if _, ok := l.entries[name]; !ok {
		l.entries[name] = &tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode}
	}
}

// file adds the host file src at path in the image, following no links:
// src must be a regular file.
func (l *layer) file(path, src string) error {
	fi, err := os.Stat(src)
	if err != nil {
		return fmt.Errorf("add %s to the image: %w", src, err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("add %s to the image: not a regular file", src)
	}
	name := strings.TrimPrefix(filepath.Clean(path), "/")
	l.dir(filepath.Dir("/"+name), 0o755)
	l.entries[name] = &tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: int64(fi.Mode().Perm()), Size: fi.Size()}
	l.content[name] = src
	return nil
}

// hostPath adds the host's path at the same place, component by component:
// every symbolic link met on the way is added as a link and followed, and
// the file it ends at is copied.
func (l *layer) hostPath(path string) error {
	for hops := 0; hops < 40; hops++ {
		link, rest, err := firstLink(path)
		if err != nil {
			return fmt.Errorf("add %s to the image: %w", path, err)
		}
		if link == "" {
			return l.file(path, path)
		}
		target, err := os.Readlink(link)
		if err != nil {
			return fmt.Errorf("add %s to the image: %w", path, err)
		}
		name := strings.TrimPrefix(link, "/")
		l.dir(filepath.Dir(link), 0o755)
		l.entries[name] = &tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(link), target)
		}
		path = filepath.Join(target, rest)
	}
	return fmt.Errorf("add %s to the image: too many symbolic links", path)
}

// firstLink returns the first component of the absolute path that is a
// symbolic link, and what follows it; "" when there is none.
func firstLink(path string) (link, rest string, err error) {
	parts := strings.Split(strings.TrimPrefix(filepath.Clean(path), "/"), "/")
	cur := "/"
	for i, p := range parts {
		cur = filepath.Join(cur, p)
		fi, err := os.Lstat(cur)
		if err != nil {
			return "", "", err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return cur, filepath.Join(parts[i+1:]...), nil
		}
	}
	return "", "", nil
}

// executable adds a host program and every shared library ldd names for
// it, each at its host path.
func (l *layer) executable(path string) error {
	if err := l.hostPath(path); err != nil {
		return err
	}
	libs, err := SharedLibraries(path)
	if err != nil {
		return err
	}
	for _, lib := range libs {
		if err := l.hostPath(lib); err != nil {
			return err
		}
	}
	return nil
}

// lddPath matches the absolute paths in ldd's output: "libc.so.6 =>
// /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and "/lib64/ld-linux-x86-64.so.2
// (0x...)".
var lddPath = regexp.MustCompile(`(?m)(?:=> |^\s*)(/\S+) \(0x`)

// SharedLibraries returns the libraries ldd resolves for the program; none
// for a static one.
func SharedLibraries(path string) ([]string, error) {
	out, err := exec.Command("ldd", path).CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte("not a dynamic executable")) {
			return nil, nil
		}
		return nil, fmt.Errorf("ldd %s: %w\n%s", path, err, out)
	}
	if bytes.Contains(out, []byte("not found")) {
		return nil, fmt.Errorf("ldd %s: a library is missing:\n%s", path, out)
	}
	var libs []string
	for _, m := range lddPath.FindAllSubmatch(out, -1) {
		libs = append(libs, string(m[1]))
	}
	return libs, nil
}

// tar writes the layer as a tar stream, parents before children.
func (l *layer) tar() ([]byte, error) {
	names := make([]string, 0, len(l.entries))
	for n := range l.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		if err := tw.WriteHeader(l.entries[n]); err != nil {
			return nil, fmt.Errorf("write %s into the layer: %w", n, err)
		}
		if src, ok := l.content[n]; ok {
			if err := copyFile(tw, src); err != nil {
				return nil, fmt.Errorf("write %s into the layer: %w", n, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close the layer: %w", err)
	}
	return buf.Bytes(), nil
}

func copyFile(w io.Writer, src string) error {
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}
