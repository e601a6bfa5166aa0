package node

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Image references. The registry name does not exist: every image is
// imported into containerd before use and none is ever pulled.
const (
	AgentImageRef = "volume-agent.test/volume-agent:e2e"
	SleepImageRef = "volume-agent.test/sleep:e2e"
	PauseImageRef = "volume-agent.test/pause:e2e"
)

// Image is an image to import into the node.
type Image = v1.Image

// AgentBinaryPath and AgentEntrypoint are where the Dockerfile puts the
// agent and how it starts it; the Dockerfile parity test holds them to the
// Dockerfile.
const AgentBinaryPath = "/usr/local/bin/volume-agent"

// AgentEntrypoint is the agent image's ENTRYPOINT.
var AgentEntrypoint = []string{AgentBinaryPath}

// AgentTools are the programs the agent runs, at their paths in a Debian
// image: mount(8) and umount(8) for every mount, mount.nfs for NFS volumes
// (mount(8) runs /sbin/mount.<type>), blkid and mkfs.ext4 to format an empty
// block device for a local PV, btrfs(8) for subvolumes with qgroup limits
// (package btrfs). The agent image carries them with their shared
// libraries, copied from the host.
var AgentTools = []string{"/bin/mount", "/bin/umount", "/sbin/mount.nfs", "/sbin/blkid", "/sbin/mkfs.ext4", "/bin/btrfs"}

// imagePath is the PATH of the images, Debian's default for root.
const imagePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// BuildAgentImage builds the agent image in the Dockerfile's layout from the
// built agent binary: the binary at AgentBinaryPath, AgentTools with their
// libraries, ENTRYPOINT AgentEntrypoint.
func BuildAgentImage(agentBinary string) (v1.Image, error) {
	l := newLayer()
	for _, d := range []string{"/tmp", "/run", "/etc", "/proc", "/sys", "/dev"} {
		l.dir(d, 0o755)
	}
	l.entries["tmp"].Mode = 0o1777
	if err := l.file(AgentBinaryPath, agentBinary); err != nil {
		return nil, err
	}
	// The Dockerfile builds the agent static (CGO_ENABLED=0); a test build
	// may be linked against the host's C library: bring that along.
	libs, err := SharedLibraries(agentBinary)
	if err != nil {
		return nil, err
	}
	for _, lib := range libs {
		if err := l.hostPath(lib); err != nil {
			return nil, err
		}
	}
	for _, tool := range AgentTools {
		if err := l.executable(tool); err != nil {
			return nil, err
		}
	}
	return imageOf(l, AgentEntrypoint)
}

// buildSleepImage builds an image whose only file is the static sleeper
// binary (package sleeper), its ENTRYPOINT.
func buildSleepImage(sleeper string) (v1.Image, error) {
	l := newLayer()
	if err := l.file("/sleeper", sleeper); err != nil {
		return nil, err
	}
	return imageOf(l, []string{"/sleeper"})
}

func imageOf(l *layer, entrypoint []string) (v1.Image, error) {
	data, err := l.tar()
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	})
	if err != nil {
		return nil, fmt.Errorf("build layer: %w", err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, fmt.Errorf("build image: %w", err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("build image: %w", err)
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = runtime.GOOS, runtime.GOARCH
	cfg.Config.Entrypoint = entrypoint
	cfg.Config.Env = []string{"PATH=" + imagePath}
	return mutate.ConfigFile(img, cfg)
}

// writeImage writes img as a `docker save` tarball under ref into dir, for
// `ctr images import`.
func writeImage(dir, ref string, img v1.Image) (string, error) {
	tag, err := name.NewTag(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	path := filepath.Join(dir, filepath.Base(tag.RepositoryStr())+".tar")
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return "", fmt.Errorf("write image %s: %w", ref, err)
	}
	return path, nil
}

// buildSleeper builds the sleeper program, static, into dir and returns its
// path.
func buildSleeper(t testing.TB, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "sleeper")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", path,
		"github.com/volume-agent/volume-agent/test/node/sleeper")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("node: build the sleeper: %v\n%s", err, out)
	}
	return path
}

// BuildStaticImage builds an image in the layout of the upstream images of
// the Kubernetes CSI sidecars (distroless/static with one program): the
// static binary at path, which is its ENTRYPOINT, and a world-writable /tmp.
// It refuses a binary that needs shared libraries: the image holds none.
func BuildStaticImage(binary, path string) (v1.Image, error) {
	libs, err := SharedLibraries(binary)
	if err != nil {
		return nil, err
	}
	if len(libs) > 0 {
		return nil, fmt.Errorf("build an image of %s: it is linked against %v; build it with CGO_ENABLED=0", binary, libs)
	}
	l := newLayer()
	l.dir("/tmp", 0o1777)
	if err := l.file(path, binary); err != nil {
		return nil, err
	}
	return imageOf(l, []string{path})
}
