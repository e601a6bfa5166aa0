package e2e

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path"
	"regexp"
	"strings"
	"testing"

	"github.com/volume-agent/volume-agent/test/node"
)

// dockerfile is the image the project ships.
const dockerfile = "../../Dockerfile"

// TestDockerfileParity holds the image the real-node test builds in Go
// (test/node) to the Dockerfile, which cannot be built here without a
// container engine:
//   - the agent binary is where the Dockerfile's final stage copies it, and
//     the ENTRYPOINT is the same;
//   - "the same tools" means: every program the agent runs (node.AgentTools:
//     mount, umount, mount.nfs, blkid, mkfs.ext4, btrfs) is an executable file in
//     the Go-built image with every shared library it needs, and the
//     Dockerfile's image has it too, because the Debian package that ships
//     it (dpkg -S on this Debian host) is either in every Debian base image
//     (Priority: required, what debootstrap's minbase installs) or named in
//     the Dockerfile's apt-get install; and every package the Dockerfile
//     installs ships at least one of node.AgentTools, so a tool added to
//     the Dockerfile cannot be missing from the Go-built image unnoticed.
func TestDockerfileParity(t *testing.T) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skipf("the parity check asks dpkg which Debian package ships each tool: %v", err)
	}
	final := finalStage(t)
	img, err := node.BuildAgentImage(binary)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	files := imageFiles(t, img)

	// ENTRYPOINT and the binary's path.
	m := regexp.MustCompile(`(?m)^ENTRYPOINT\s+(\[.*\])\s*$`).FindStringSubmatch(final)
	if m == nil {
		t.Fatalf("%s: no exec-form ENTRYPOINT in the final stage", dockerfile)
	}
	var entrypoint []string
	if err := json.Unmarshal([]byte(m[1]), &entrypoint); err != nil {
		t.Fatalf("%s: ENTRYPOINT %s: %v", dockerfile, m[1], err)
	}
	if strings.Join(cfg.Config.Entrypoint, " ") != strings.Join(entrypoint, " ") {
		t.Errorf("entrypoint: Go-built image %q, Dockerfile %q", cfg.Config.Entrypoint, entrypoint)
	}
	c := regexp.MustCompile(`(?m)^COPY\s+--from=\S+\s+\S+\s+(\S+)\s*$`).FindStringSubmatch(final)
	if c == nil {
		t.Fatalf("%s: no COPY --from=<build stage> of the binary in the final stage", dockerfile)
	}
	if c[1] != node.AgentBinaryPath {
		t.Errorf("binary path: Go-built image %s, Dockerfile %s", node.AgentBinaryPath, c[1])
	}
	if h, ok := resolve(files, node.AgentBinaryPath); !ok || h.Mode&0o111 == 0 {
		t.Errorf("Go-built image: no executable %s", node.AgentBinaryPath)
	}

	// The tools.
	installed := aptInstalled(t, final)
	shipped := map[string]bool{}
	for _, tool := range node.AgentTools {
		if h, ok := resolve(files, tool); !ok || h.Mode&0o111 == 0 {
			t.Errorf("Go-built image: no executable %s", tool)
		}
		libs, err := node.SharedLibraries(tool)
		if err != nil {
			t.Fatal(err)
		}
		for _, lib := range libs {
			if _, ok := resolve(files, lib); !ok {
				t.Errorf("Go-built image: %s lacks its library %s", tool, lib)
			}
		}
		pkg := debianPackageOf(t, tool)
		shipped[pkg] = true
		if !installed[pkg] && debianPriority(t, pkg) != "required" {
			t.Errorf("%s comes from Debian package %s, which the Dockerfile does not install and the base image lacks (not Priority: required)", tool, pkg)
		}
	}
	for pkg := range installed {
		if !shipped[pkg] {
			t.Errorf("%s installs %s, which ships none of node.AgentTools %v: add the tool the agent needs from it there, so the Go-built image has it too", dockerfile, pkg, node.AgentTools)
		}
	}
}

// finalStage returns the Dockerfile's last stage, from its FROM on, with
// continuation lines joined.
func finalStage(t *testing.T) string {
	t.Helper()
	raw, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.ReplaceAll(string(raw), "\\\n", " ")
	i := strings.LastIndex(text, "\nFROM ")
	if i < 0 {
		t.Fatalf("%s: no FROM", dockerfile)
	}
	return text[i+1:]
}

// aptInstalled returns the packages the stage's `apt-get install` lines name.
func aptInstalled(t *testing.T, stage string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, m := range regexp.MustCompile(`apt-get install ([^&;\n]*)`).FindAllStringSubmatch(stage, -1) {
		for _, f := range strings.Fields(m[1]) {
			if !strings.HasPrefix(f, "-") {
				out[f] = true
			}
		}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no apt-get install in the final stage", dockerfile)
	}
	return out
}

// debianPackageOf asks dpkg which package ships path (Debian's packages
// name the unmerged path, /sbin/... rather than /usr/sbin/...).
func debianPackageOf(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("dpkg", "-S", path).Output()
	if err != nil {
		t.Fatalf("dpkg -S %s: %v", path, err)
	}
	pkg, _, _ := strings.Cut(strings.TrimSpace(string(out)), ":")
	return pkg
}

func debianPriority(t *testing.T, pkg string) string {
	t.Helper()
	out, err := exec.Command("dpkg-query", "-W", "-f", "${Priority}", pkg).Output()
	if err != nil {
		t.Fatalf("dpkg-query %s: %v", pkg, err)
	}
	return strings.TrimSpace(string(out))
}

// imageFiles returns the tar headers of the image's files by absolute path.
func imageFiles(t *testing.T, img node.Image) map[string]*tar.Header {
	t.Helper()
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]*tar.Header{}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files[path.Clean("/"+h.Name)] = h
		}
		rc.Close()
	}
	return files
}

// resolve follows symbolic links inside the image to the file p names.
func resolve(files map[string]*tar.Header, p string) (*tar.Header, bool) {
	for hops := 0; hops < 40; hops++ {
		h, rest, ok := firstImageLink(files, p)
		if !ok {
			return nil, false
		}
		if h.Typeflag != tar.TypeSymlink {
			return h, true
		}
		target := h.Linkname
		if !path.IsAbs(target) {
			target = path.Join(path.Dir(path.Clean("/"+h.Name)), target)
		}
		p = path.Join(target, rest)
	}
	return nil, false
}

// firstImageLink walks p's components and returns the first symbolic link
// on the way with what follows it, or the file itself.
func firstImageLink(files map[string]*tar.Header, p string) (*tar.Header, string, bool) {
	parts := strings.Split(strings.TrimPrefix(path.Clean(p), "/"), "/")
	cur := "/"
	for i, part := range parts {
		cur = path.Join(cur, part)
		h, ok := files[cur]
		if !ok {
			return nil, "", false
		}
		if h.Typeflag == tar.TypeSymlink {
			return h, path.Join(parts[i+1:]...), true
		}
	}
	return files[cur], "", true
}

// TestDockerfileBuild builds the Dockerfile where a Docker engine answers
// and checks the same contents as TestDockerfileParity on the real image:
// the binary, the ENTRYPOINT and every tool executable. Without an engine
// (this project's CI has none: the images it tests are built in Go) it
// skips; TestDockerfileParity is the check that always runs.
func TestDockerfileBuild(t *testing.T) {
	if out, err := exec.Command("docker", "info").CombinedOutput(); err != nil {
		t.Skipf("no Docker engine to build %s (TestDockerfileParity checks it against the Go-built image instead): %v\n%s", dockerfile, err, tail(string(out), 3))
	}
	const tag = "volume-agent-parity:test"
	if out, err := exec.Command("docker", "build", "-t", tag, "-f", dockerfile, "../..").CombinedOutput(); err != nil {
		t.Fatalf("docker build: %v\n%s", err, tail(string(out), 30))
	}
	t.Cleanup(func() { _ = exec.Command("docker", "image", "rm", tag).Run() })
	out, err := exec.Command("docker", "image", "inspect", "-f", "{{json .Config.Entrypoint}}", tag).Output()
	if err != nil {
		t.Fatal(err)
	}
	var entrypoint []string
	if err := json.Unmarshal(out, &entrypoint); err != nil {
		t.Fatal(err)
	}
	if strings.Join(entrypoint, " ") != strings.Join(node.AgentEntrypoint, " ") {
		t.Errorf("Dockerfile image entrypoint %q, Go-built image %q", entrypoint, node.AgentEntrypoint)
	}
	check := "for f in \"$@\"; do test -x \"$f\" || { echo \"missing $f\"; exit 1; }; done"
	args := append([]string{"run", "--rm", "--entrypoint", "/bin/sh", tag, "-c", check, "sh", node.AgentBinaryPath}, node.AgentTools...)
	if out, err := exec.Command("docker", args...).CombinedOutput(); err != nil {
		t.Errorf("Dockerfile image: %v\n%s", err, out)
	}
}
