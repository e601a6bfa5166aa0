// Command mountnfs is a test double of nfs-utils' mount.nfs for machines
// whose kernel has no NFS client but has FUSE. Tests bind-mount it over
// /sbin/mount.nfs inside a private mount namespace (see package nfstest),
// so that `mount -t nfs SERVER:/PATH DIR -o OPTS` — util-linux's mount(8)
// runs /sbin/mount.nfs SPEC DIR -o OPTS — mounts the export through FUSE
// with a userspace NFSv3 client (package nfs3).
//
// It takes mount.nfs's command line, `mount.nfs SPEC DIR [-rvVwfnsh] [-o
// OPTS]`, and its exit codes (1: usage, 32: the mount failed). It refuses
// options that nfs(5) and mount(8) do not document, and documented ones it
// cannot honour (UDP, NFSv4, Kerberos). The server's ports come from port=
// and mountport= (mountport defaults to port): there is no portmapper.
//
// The file system must outlive the command, since mount(8) waits for it:
// the command re-executes itself as a detached FUSE server (its own
// session, output to a log file) and exits once the mount is in place or
// has failed; killed before that, it takes the server with it, so that
// nothing gets mounted after mount(8) gave up. The server exits when the
// file system is unmounted (umount, umount -f, umount -l), on SIGTERM, or
// when the process named by $NFSTEST_LIFELINE_PID exits; the last two
// detach the mount first.
//
// The FUSE mount ("fuse.nfs-test", source SPEC) is a userspace NFSv3
// client. What it does not do:
//   - cache: attributes and names are asked from the server on every
//     access (as noac) unless actimeo= says otherwise;
//   - locks: flock and fcntl locks are local to the machine (as
//     local_lock=all); no NLM;
//   - hard links (go-nfs's LINK is broken), device nodes, FIFOs, sockets,
//     extended attributes, ACLs;
//   - bg: a mount that cannot reach the server fails in the foreground.
//
// hard (the default) and soft follow nfs(5): a hard request is retried
// until the server answers, or until its caller gets a signal (EINTR, as
// with the old intr option: the kernel client ends it for SIGKILL only,
// but FUSE cannot tell the helper which signal came, and a request left
// waiting would keep a killed process in D state); a soft one fails with
// EIO after timeo×(1+2+…+(retrans+1)), linear backoff. Mounting itself
// gives up after retry= minutes (2 by default; retry=0: after the time a
// soft request takes), hard or soft. A request whose connection broke
// is sent again on a new one, so a mount heals when its server comes back
// on the same address with the same file handles.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
)

// Exit codes of mount.nfs.
const (
	exitUsage = 1
	exitFail  = 32
)

// invocation is a parsed mount.nfs command line.
type invocation struct {
	spec, server, path string
	dir                string // the mount point, absolute
	fake, verbose      bool
	cfg                config
}

func init() {
	// The FUSE server clears the parent-death signal it was started with
	// (see serve). The kernel keeps that setting per thread, and only the
	// main thread has it: main must run there.
	runtime.LockOSThread()
}

func main() {
	if os.Getenv(readyFDEnv) != "" {
		os.Exit(serve())
	}
	os.Exit(run(os.Args))
}

func run(args []string) int {
	inv, code, err := parseArgs(args)
	if err != nil {
		fmt.Fprintf(os.Stderr, "mount.nfs: %v\n", err)
		return code
	}
	if inv == nil || inv.fake {
		return 0
	}
	// The server runs in /, so it gets the mount point made absolute.
	serverArgs := append([]string{args[0], args[1], inv.dir}, args[3:]...)
	if err := startServer(serverArgs); err != nil {
		fmt.Fprintf(os.Stderr, "mount.nfs: mounting %s failed: %v\n", inv.spec, err)
		return exitFail
	}
	if inv.verbose {
		fmt.Printf("mount.nfs: %s mounted on %s through FUSE (test helper)\n", inv.spec, inv.dir)
	}
	return 0
}

const usage = "usage: mount.nfs remotetarget dir [-rvVwfnsh] [-o nfsoptions]"

// parseArgs parses `mount.nfs SPEC DIR [-rvVwfnsh] [-o OPTS]`. It returns
// a nil invocation, and no error, when there is nothing to mount (-V, -h).
func parseArgs(args []string) (*invocation, int, error) {
	if filepath.Base(args[0]) == "mount.nfs4" {
		return nil, exitFail, fmt.Errorf("NFS version 4 is not supported by this test helper")
	}
	switch {
	case len(args) >= 2 && args[1] == "-V":
		fmt.Println("mount.nfs (volume-agent test helper: NFSv3 through FUSE)")
		return nil, 0, nil
	case len(args) >= 2 && args[1] == "-h":
		fmt.Println(usage)
		return nil, 0, nil
	case len(args) < 3:
		return nil, exitUsage, fmt.Errorf("%s", usage)
	}
	inv := &invocation{spec: args[1], cfg: defaultConfig()}
	opts, err := parseFlags(inv, args[3:])
	if err != nil {
		return nil, exitUsage, err
	}
	if err := parseOptions(&inv.cfg, strings.Join(opts, ",")); err != nil {
		return nil, exitFail, err
	}
	if inv.server, inv.path, err = parseSpec(inv.spec); err != nil {
		return nil, exitFail, err
	}
	if inv.dir, err = mountPoint(args[2]); err != nil {
		return nil, exitFail, err
	}
	return inv, 0, nil
}

// parseFlags applies -rvwfns to inv and returns the -o option lists.
func parseFlags(inv *invocation, args []string) ([]string, error) {
	var opts []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if len(a) < 2 || a[0] != '-' {
			return nil, fmt.Errorf("unexpected argument %q; %s", a, usage)
		}
		for j := 1; j < len(a); j++ {
			switch a[j] {
			case 'r', 'w':
				inv.cfg.readOnly = a[j] == 'r'
			case 'v':
				inv.verbose = true
			case 'f':
				inv.fake = true
			case 'n': // no /etc/mtab to update
			case 's':
				inv.cfg.sloppy = true
			case 'o':
				list := a[j+1:]
				if list == "" {
					if i++; i == len(args) {
						return nil, fmt.Errorf("-o needs an option list; %s", usage)
					}
					list = args[i]
				}
				opts = append(opts, list)
				j = len(a)
			default:
				return nil, fmt.Errorf("invalid flag -%c; %s", a[j], usage)
			}
		}
	}
	return opts, nil
}

// mountPoint returns dir made absolute, once it is known to be a
// directory.
func mountPoint(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(abs)
	switch {
	case err != nil:
		return "", fmt.Errorf("mount point %s does not exist", abs)
	case !st.IsDir():
		return "", fmt.Errorf("mount point %s is not a directory", abs)
	}
	return abs, nil
}
