package atomicwriter

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzWriterAdversary plays a container against the writer: the fuzz bytes
// are a program of writes of small random payloads, interleaved with
// symlinks planted in the volume (pointing outside it, at ..data, at
// user-visible names, at the payload directory), regular files and
// directories put where the writer keeps its entries, and entries removed.
//
// After every step:
//   - nothing outside the volume directory changed (the "outside" directory
//     beside it holds files a followed link would hit);
//   - a write that succeeds leaves ..data a symlink to a timestamped
//     directory holding exactly the payload, a link per top-level name, and
//     no other timestamped directory;
//   - a write that fails leaves, unless the container tampered with it,
//     ..data on the last payload written, whole;
//   - an invalid payload touches nothing.
//
// A program is a sequence of steps, each an opcode byte (mod 5) and its
// operands, every byte an index modulo the length of its list:
//
//	0 count  (depth elem... len data... mode)...   write a payload of count+1 files
//	1 planted target                               plant a symlink
//	2 planted even                                 put a directory there (with a file if even)
//	3 planted                                      put a regular file there
//	4 planted                                      remove what is there
//
// Seeds: the f.Add calls and testdata/fuzz/FuzzWriterAdversary, named for
// the attack each plays.
func FuzzWriterAdversary(f *testing.F) {
	writeA := []byte{0, 0, 0, 0, 1, 'v', 0o66}                          // a = "v"
	writeSub := []byte{0, 1, 1, 2, 3, 1, 'x', 0o66, 0, 0, 1, 'y', 0o44} // sub/x = "x", a = "y"
	f.Add(writeA)
	f.Add(append(append(writeSub, 1, 0, 0), writeA...))   // ..data -> outside, then a new payload
	f.Add(append(append(writeSub, 1, 8, 3), writeSub...)) // ..data/sub -> outside/secret, same payload
	f.Fuzz(func(t *testing.T, program []byte) {
		a := newAdversary(t)
		r := &byteReader{b: program}
		for step := 0; step < maxSteps && !r.done(); step++ {
			a.step(r)
		}
	})
}

const maxSteps = 12

// adversary is one run: a volume and the "outside" beside it.
type adversary struct {
	t        *testing.T
	dir      string // the volume directory
	top      string // the temporary directory holding it
	w        *Writer
	outside  map[string]entry // snapshot of everything under top but dir
	last     map[string]File  // the last payload written; nil before any
	tampered bool             // the container touched ..data or the payload since
}

func newAdversary(t *testing.T) *adversary {
	top := t.TempDir()
	dir := filepath.Join(top, "vol")
	out := filepath.Join(top, "outside")
	for _, d := range []string{dir, filepath.Join(out, "sub")} {
		must(t, os.MkdirAll(d, 0o755))
	}
	for name, content := range map[string]string{"secret": "host secret", "a": "host a", "sub/x": "host x"} {
		must(t, os.WriteFile(filepath.Join(out, name), []byte(content), 0o600))
	}
	a := &adversary{t: t, dir: dir, top: top, w: New(dir)}
	a.outside = a.snapshotOutside()
	return a
}

// Names the payloads and the container use: few, so that they meet.
var (
	elems = []string{"a", "b", "sub", "x", "..data", "..x", ".", "secret"}
	// planted are where the container plants entries; "@" stands for the
	// directory ..data points at.
	planted = []string{"..data", "..data_tmp", "a", "sub", "..2020_01_02_03_04_05.1", "b",
		"@", "@/a", "@/sub", "@/sub/x", "x"}
	// targets are where planted links point; "OUT" stands for the outside
	// directory, absolute.
	targets = []string{"OUT", "../outside", "..data", "OUT/secret", "/", "..data/a", "../outside/sub",
		"..2020_01_02_03_04_05.1", "a", "."}
)

func (a *adversary) step(r *byteReader) {
	switch r.next() % 5 {
	case 0:
		a.write(a.payload(r))
	case 1:
		a.plantLink(a.where(r.pick(planted)), r.pick(targets))
	case 2:
		a.plantDir(a.where(r.pick(planted)), r.next()%2 == 0)
	case 3:
		a.plantFile(a.where(r.pick(planted)))
	case 4:
		a.remove(a.where(r.pick(planted)))
	}
	a.checkOutside()
}

// payload reads a payload of one to four files: a count, then per file
// its depth and elements, its content length and bytes, and its mode.
func (a *adversary) payload(r *byteReader) map[string]File {
	p := map[string]File{}
	for n := int(r.next()%4) + 1; n > 0; n-- {
		depth := int(r.next()%3) + 1
		parts := make([]string, depth)
		for i := range parts {
			parts[i] = r.pick(elems)
		}
		data := r.take(int(r.next() % 16))
		m := fs.FileMode(r.next())
		p[strings.Join(parts, "/")] = File{Data: data, Mode: (m&0o7)<<6 | (m>>3&0o7)<<3}
	}
	return p
}

// where turns a planted name into a path in the volume, "" when "@" stands
// for a payload directory there is none of.
func (a *adversary) where(name string) string {
	rest, inPayload := strings.CutPrefix(name, "@")
	if !inPayload {
		return filepath.Join(a.dir, name)
	}
	target, err := os.Readlink(filepath.Join(a.dir, dataLink))
	if err != nil || !tsDirPattern.MatchString(target) {
		return ""
	}
	a.tampered = true
	return filepath.Join(a.dir, target, rest)
}

func (a *adversary) touch(p string) bool {
	if p == "" || !strings.HasPrefix(p, a.dir+"/") {
		return false
	}
	if filepath.Base(p) == dataLink {
		a.tampered = true
	}
	// Clear the way without following anything: RemoveAll unlinks a
	// symlink at p, and p is reached through no link, as every directory
	// from the volume down to p's parent is checked to be one.
	for d := filepath.Dir(p); d != a.dir; d = filepath.Dir(d) {
		if info, err := os.Lstat(d); err != nil || !info.IsDir() {
			return false
		}
	}
	must(a.t, os.RemoveAll(p))
	return true
}

func (a *adversary) plantLink(p, target string) {
	if a.touch(p) {
		must(a.t, os.Symlink(strings.Replace(target, "OUT", filepath.Join(a.top, "outside"), 1), p))
	}
}

func (a *adversary) plantDir(p string, withFile bool) {
	if !a.touch(p) {
		return
	}
	must(a.t, os.Mkdir(p, 0o755))
	if withFile {
		must(a.t, os.WriteFile(filepath.Join(p, "a"), []byte("container"), 0o644))
	}
}

func (a *adversary) plantFile(p string) {
	if a.touch(p) {
		must(a.t, os.WriteFile(p, []byte("container"), 0o644))
	}
}

func (a *adversary) remove(p string) {
	a.touch(p)
}

func (a *adversary) write(payload map[string]File) {
	t := a.t
	invalid := validatePayload(payload) != nil
	var before map[string]entry
	if invalid {
		before = snapshot(t, a.dir)
	}
	_, err := a.w.Write(payload)
	switch {
	case invalid:
		if !errors.Is(err, ErrInvalidPayload) {
			t.Fatalf("Write of an invalid payload %s = %v, want ErrInvalidPayload", describe(payload), err)
		}
		assertSameSnapshot(t, before, snapshot(t, a.dir))
	case err == nil:
		a.checkPayload(payload)
		a.last, a.tampered = payload, false
	case !a.tampered && a.last != nil:
		// A write fails before its switch, and ..data keeps the last
		// payload, or after it (in the clean-up), and ..data has the new.
		if a.holds(payload) {
			a.last = payload
		}
		a.checkDataDir(a.last)
	}
}

// holds reports whether ..data leads to exactly payload.
func (a *adversary) holds(payload map[string]File) bool {
	target, err := os.Readlink(filepath.Join(a.dir, dataLink))
	if err != nil || !tsDirPattern.MatchString(target) {
		return false
	}
	got, err := readPayload(filepath.Join(a.dir, target))
	return err == nil && describe(got) == describe(payload)
}

// checkPayload checks the volume after payload was written.
func (a *adversary) checkPayload(payload map[string]File) {
	t := a.t
	current := a.checkDataDir(payload)
	for _, name := range topLevelNames(payload) {
		if got, err := os.Readlink(filepath.Join(a.dir, name)); err != nil || got != linkTarget(name) {
			t.Fatalf("after writing %s: %s -> %q (%v), want %s", describe(payload), name, got, err, linkTarget(name))
		}
	}
	des, err := os.ReadDir(a.dir)
	must(t, err)
	for _, de := range des {
		if de.IsDir() && tsDirPattern.MatchString(de.Name()) && de.Name() != current {
			t.Fatalf("after writing %s: stale payload directory %s left", describe(payload), de.Name())
		}
	}
}

// checkDataDir checks that ..data is a symlink to a timestamped directory
// holding exactly payload, and returns its name.
func (a *adversary) checkDataDir(payload map[string]File) string {
	t := a.t
	target, err := os.Readlink(filepath.Join(a.dir, dataLink))
	if err != nil || !tsDirPattern.MatchString(target) {
		t.Fatalf("..data -> %q (%v), want a timestamped directory", target, err)
	}
	if info, err := os.Lstat(filepath.Join(a.dir, target)); err != nil || !info.IsDir() {
		t.Fatalf("..data -> %s, which is no directory (%v)", target, err)
	}
	got, err := readPayload(filepath.Join(a.dir, target))
	if err != nil {
		t.Fatalf("..data -> %s: %v", target, err)
	}
	if describe(got) != describe(payload) {
		t.Fatalf("..data -> %s holds %s, want %s", target, describe(got), describe(payload))
	}
	return target
}

// readPayload reads the files below root, which must all be regular files
// or directories.
func readPayload(root string) (map[string]File, error) {
	got := map[string]File{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is a %v, not a regular file", p, d.Type())
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		got[rel] = File{Data: data, Mode: info.Mode().Perm()}
		return err
	})
	return got, err
}

func (a *adversary) checkOutside() {
	assertSameSnapshot(a.t, a.outside, a.snapshotOutside())
	if a.t.Failed() {
		a.t.FailNow()
	}
}

// snapshotOutside records everything under the temporary directory but
// the volume: the outside directory, and anything that may appear beside.
func (a *adversary) snapshotOutside() map[string]entry {
	snap := snapshot(a.t, a.top)
	for p := range snap {
		if p == a.dir || strings.HasPrefix(p, a.dir+"/") {
			delete(snap, p)
		}
	}
	return snap
}

// describe renders a payload as sorted "path mode content" lines.
func describe(payload map[string]File) string {
	var b strings.Builder
	for _, p := range sortedPaths(payload) {
		fmt.Fprintf(&b, "%s %v %q; ", path.Clean(p), payload[p].Mode, payload[p].Data)
	}
	return b.String()
}

// byteReader reads a fuzz program; past its end it reads zeros.
type byteReader struct {
	b []byte
	i int
}

func (r *byteReader) done() bool { return r.i >= len(r.b) }

func (r *byteReader) next() byte {
	if r.done() {
		r.i++
		return 0
	}
	r.i++
	return r.b[r.i-1]
}

func (r *byteReader) pick(from []string) string { return from[int(r.next())%len(from)] }

func (r *byteReader) take(n int) []byte {
	out := make([]byte, n)
	for i := range out {
		out[i] = r.next()
	}
	return out
}
