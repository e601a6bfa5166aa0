package node

// ToolsImageRef is an image with a POSIX shell and the coreutils a test's
// workload needs to write, sync, measure and hash its volumes (ToolPrograms),
// copied from this Debian host with their shared libraries. Pass
// BuildToolsImage's image under it in Options.Images.
const ToolsImageRef = "volume-agent.test/tools:e2e"

// ToolPrograms are the programs of the tools image, at their Debian paths.
var ToolPrograms = []string{
	"/bin/sh", "/bin/dd", "/bin/df", "/bin/sync", "/bin/sha256sum", "/bin/cat",
	"/bin/mv", "/bin/rm", "/bin/ls", "/bin/sleep", "/bin/stat",
}

// BuildToolsImage builds the tools image: ToolPrograms with their
// libraries, a world-writable /tmp, and no ENTRYPOINT (pods give the
// command, typically /bin/sh -c).
func BuildToolsImage() (Image, error) {
	l := newLayer()
	for _, d := range []string{"/tmp", "/proc", "/sys", "/dev", "/etc"} {
		l.dir(d, 0o755)
	}
	l.entries["tmp"].Mode = 0o1777
	for _, p := range ToolPrograms {
		if err := l.executable(p); err != nil {
			return nil, err
		}
	}
	return imageOf(l, nil)
}
