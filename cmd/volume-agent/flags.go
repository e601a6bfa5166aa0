package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/volume-agent/volume-agent/internal/provisioner"
	"github.com/volume-agent/volume-agent/internal/status"
)

// options are the command-line flags.
type options struct {
	rootDir     string
	nodeName    string
	manifests   string
	statusAddr  string
	metricsAddr string
	healthzAddr string
	// socketGroup is --status-socket-group as given; socketGID the group
	// it names once parsed (-1: the agent's own).
	socketGroup  string
	socketGID    int
	logLevel     string
	logFormat    string
	unprivileged bool
	hostRoot     string
	kubeconfig   string
	// provisionerKubeconfig is the identity of the provisioners' clients
	// (--provisioner-kubeconfig); see provisionerConfig.
	provisionerKubeconfig string
	inCluster             bool
	mintTokens            bool
	apiQPS                float32
	apiBurst              int
	checkPeriod           time.Duration
	// statsPeriod is how often each volume's usage is measured at most
	// (--volume-stats-period); 0 turns walks off.
	statsPeriod time.Duration
	profiling   bool
	// provisioners are the dynamic provisioners to run (--provisioners).
	provisioners  []string
	localPathRoot string
	leaseNS       string
	capacityNS    string
	// reclaimDelay is how long released storage stays restorable before it
	// is deleted (--reclaim-delay).
	reclaimDelay time.Duration
	// csiEndpoint, when set, serves the local provisioner's volumes as
	// the CSI driver local.volume-agent.io on this unix socket
	// (--csi-endpoint); registrationDir is where the kubelet's plugin
	// registration socket is served (--kubelet-registration-dir; "": none).
	csiEndpoint     string
	registrationDir string
	// version asks for the version instead of running the agent.
	version bool
}

// manifestKinds are the kinds --manifests reads (package manifest's).
const manifestKinds = "Pod, ConfigMap, Secret, PersistentVolume, PersistentVolumeClaim, StorageClass (storage.k8s.io/v1) and Node"

// The names --provisioners takes.
const (
	provLocal     = "local"
	provNFSSubdir = "nfs-subdir"
)

const usage = `volume-agent mounts the volumes of the pods on this node under its root directory.

Usage:
  volume-agent --manifests DIR [flags]          # no cluster: pods from a manifest directory
  volume-agent --kubeconfig FILE [flags]        # a node agent of a cluster (in a pod: no flag needed)
  volume-agent status|claims [flags]            # what a running agent serves
  volume-agent claims delete-now NS/NAME        # delete a released claim's storage before --reclaim-delay ends
  volume-agent wait UID|NAMESPACE/NAME [flags]  # wait until a pod's volumes are ready
  volume-agent validate DIR                     # check a manifest directory, running nothing
  volume-agent version                          # the build (also: --version)
  volume-agent help [COMMAND]                   # this, or a command's usage (also: COMMAND --help)

Flags:
`

// agentFlags returns the agent's flag set, bound to o; finish completes o
// once the flags are parsed.
func agentFlags(o *options) (fs *flag.FlagSet, finish func()) {
	fs = flag.NewFlagSet("volume-agent", flag.ContinueOnError)
	fs.StringVar(&o.rootDir, "root-dir", "/var/lib/volume-agent", "directory holding pods/<uid>/volumes/<plugin>/<volume> for every pod's volumes")
	// The defaults of --node-name and --leader-election-namespace come from
	// the environment, after parsing: the usage says where from, once.
	fs.StringVar(&o.nodeName, "node-name", "", "this node's name; pods with spec.nodeName equal to it (or empty, in manifests) are served; recorded in <root-dir>/node-name once the agent has started (default $NODE_NAME, else the hostname)")
	fs.StringVar(&o.manifests, "manifests", "", "directory of manifests (*.yaml, *.yml, *.json) of the kinds "+manifestKinds+", watched for changes")
	fs.StringVar(&o.statusAddr, "status-addr", defaultAddr, "address of the HTTP status endpoint (/healthz, /readyz, /v1/pods, /v1/claims, /metrics): host:port, or unix:///path for a unix socket of mode 0660 that only root and --status-socket-group may connect to (the DaemonSet's unix:///run/volume-agent/status.sock); on TCP every local user can read the node's pods, claims and paths")
	fs.StringVar(&o.socketGroup, "status-socket-group", "", "group (name or number) of the unix sockets the agent listens on, whose members may read the status endpoint; default the agent's own group (root)")
	fs.StringVar(&o.healthzAddr, "healthz-addr", "", "also serve /healthz and /readyz, and nothing else, on this address (the DaemonSet's 127.0.0.1:9810, for the kubelet's probes while the status endpoint is a unix socket); default off")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "also serve /metrics, and only /metrics, on this address (e.g. 0.0.0.0:9811 for Prometheus to scrape from off the node); /metrics on --status-addr stays; default off")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "console", "log format: console or json")
	fs.BoolVar(&o.unprivileged, "unprivileged", false, "run without root: mount nothing, so memory-backed emptyDir, secret and projected volumes are written to disk instead of tmpfs")
	fs.StringVar(&o.hostRoot, "host-root", "/", "where the host's root file system is visible to the agent (e.g. /host in a container); hostPath volumes are checked below it")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the API server to watch pods bound to --node-name from; inside a pod the in-cluster config is used without it (see --in-cluster)")
	fs.StringVar(&o.provisionerKubeconfig, "provisioner-kubeconfig", "", "kubeconfig the dynamic provisioners (--provisioners) alone use, for the cluster-wide claims, PVs and StorageClasses a node identity in --kubeconfig cannot read (default: in a pod, the pod's service account; else --kubeconfig)")
	fs.BoolVar(&o.inCluster, "in-cluster", true, "inside a pod ($KUBERNETES_SERVICE_HOST set) and without --kubeconfig, become a node agent of the pod's cluster; --in-cluster=false serves only --manifests, even in a pod")
	fs.BoolVar(&o.mintTokens, "mint-tokens", true, "mint service account tokens for projected serviceAccountToken sources (TokenRequest API); when false such volumes fail")
	fs.DurationVar(&o.checkPeriod, "volume-check-period", 30*time.Second, "how often mounted network volumes (NFS) are checked for a server that stopped answering; a dead one turns Uncertain and is set up again until it lives")
	fs.DurationVar(&o.statsPeriod, "volume-stats-period", time.Minute, "how often, at most, each emptyDir and claim volume's usage is measured (/v1/pods, volume_agent_volume_stats_* metrics): by statfs for a volume that is its own file system, by its qgroup for a btrfs subvolume with a qgroup limit, by one paced background walk for a plain directory; 0s turns walks off (statfs and qgroup measurements then run every minute)")
	fs.BoolVar(&o.profiling, "profiling", false, "serve Go's profiles (CPU, heap, goroutines, trace) under /debug/pprof/ on --status-addr, for go tool pprof")
	provs := fs.String("provisioners", "", "dynamic provisioners to run, comma-separated: "+provLocal+" (StorageClass provisioner "+provisioner.LocalName+", or its first name "+provisioner.LegacyLocalName+": a volume under --local-path-root per claim, WaitForFirstConsumer) and "+provNFSSubdir+" (volume-agent.io/nfs-subdir: a subdirectory of an NFS export per claim; in cluster mode one agent serves it, by leader election); default none")
	fs.StringVar(&o.localPathRoot, "local-path-root", "/var/lib/volume-agent-local", "directory on this node holding the volumes the local provisioner makes, one subdirectory per claim; keep it outside --root-dir (the agent's state and pod mounts, which it removes from) and on the disk meant for data")
	fs.StringVar(&o.leaseNS, "leader-election-namespace", "", "namespace of the Lease the nfs-subdir provisioner's leader holds (default $POD_NAMESPACE, else \"default\")")
	fs.StringVar(&o.capacityNS, "storage-capacity-namespace", "", "namespace of the CSIStorageCapacity objects through which the local provisioner tells the scheduler how much room its node has, one per StorageClass of "+provisioner.LocalName+" (default $POD_NAMESPACE, else \"default\")")
	fs.StringVar(&o.csiEndpoint, "csi-endpoint", "", "serve the local provisioner's volumes as the CSI driver "+provisioner.LocalName+" on this unix socket (unix:///path or /path, e.g. unix:///var/lib/kubelet/plugins/"+provisioner.LocalName+"/csi.sock; made 0600, root only); needs --provisioners "+provLocal+"; default off")
	fs.StringVar(&o.registrationDir, "kubelet-registration-dir", "/var/lib/kubelet/plugins_registry", "with --csi-endpoint, the kubelet's plugin registration directory, where the agent serves "+provisioner.LocalName+"-reg.sock so that the kubelet finds the CSI driver; \"\" registers nothing")
	fs.DurationVar(&o.reclaimDelay, "reclaim-delay", 10*time.Minute, "how long the storage of a released claim with reclaim policy Delete is kept aside, restorable, before it is deleted for good (from manifests: the same claim added back within it gets its data back; in a cluster: set the PersistentVolume's reclaim policy to Retain); 0s deletes as soon as nothing uses it")
	qps := fs.Float64("kube-api-qps", 50, "queries per second to the API server (at least 1)")
	fs.IntVar(&o.apiBurst, "kube-api-burst", 100, "burst of queries to the API server (at least 1)")
	fs.BoolVar(&o.version, "version", false, "print the version, as volume-agent version does, and exit")
	return fs, func() {
		o.apiQPS = float32(*qps)
		if *provs != "" {
			o.provisioners = strings.Split(*provs, ",")
		}
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if !set["node-name"] {
			o.nodeName = defaultNodeName()
		}
		if !set["leader-election-namespace"] {
			o.leaseNS = defaultNamespace()
		}
		if !set["storage-capacity-namespace"] {
			o.capacityNS = defaultNamespace()
		}
	}
}

// writeAgentUsage writes how to run the agent, and its flags, to w.
func writeAgentUsage(w io.Writer) {
	fs, _ := agentFlags(&options{})
	fs.SetOutput(w)
	fmt.Fprint(w, usage)
	fs.PrintDefaults()
}

// parseFlags parses the agent's flags. It prints nothing: it returns
// flag.ErrHelp for --help, and with --version options that say so, not
// validated.
func parseFlags(args []string) (options, error) {
	var o options
	fs, finish := agentFlags(&o)
	err := parseQuietly(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return o, err
	}
	if err != nil {
		return o, fmt.Errorf("%w (see volume-agent --help)", err)
	}
	finish()
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if o.version {
		return o, nil
	}
	if o.socketGID, err = parseGroup(o.socketGroup); err != nil {
		return o, err
	}
	return o, o.validate()
}

// parseGroup returns the group ID --status-socket-group names, by number
// or by name (the host's /etc/group, or the image's in a container); -1
// when empty.
func parseGroup(group string) (int, error) {
	if group == "" {
		return -1, nil
	}
	if gid, err := strconv.Atoi(group); err == nil {
		if gid < 0 {
			return -1, fmt.Errorf("--status-socket-group %s: want a group name or a number of 0 or more", group)
		}
		return gid, nil
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		return -1, fmt.Errorf("--status-socket-group %q: no such group here: give its number (a container sees its image's groups, not the host's)", group)
	}
	return strconv.Atoi(g.Gid)
}

// inPod reports whether the in-cluster config is to be used: in a pod,
// without --kubeconfig, unless --in-cluster=false.
func (o options) inPod() bool {
	return o.kubeconfig == "" && o.inCluster && os.Getenv("KUBERNETES_SERVICE_HOST") != ""
}

// podServiceAccount reports whether the pod's service account is at hand
// (in a pod, unless --in-cluster=false), --kubeconfig or not.
func (o options) podServiceAccount() bool {
	return o.inCluster && os.Getenv("KUBERNETES_SERVICE_HOST") != ""
}

// clusterMode reports whether the agent talks to an API server.
func (o options) clusterMode() bool { return o.kubeconfig != "" || o.inPod() }

func (o options) validate() error {
	switch {
	case o.manifests == "" && !o.clusterMode():
		return errNothingToServe
	case o.clusterMode() && (math.IsNaN(float64(o.apiQPS)) || math.IsInf(float64(o.apiQPS), 0) || o.apiQPS < 1):
		// client-go would read 0 as its default of 5 and a negative or
		// infinite rate as no limit at all; below one query per second the
		// watches of a full node take minutes to start.
		return fmt.Errorf("--kube-api-qps %v: want a number of at least 1", o.apiQPS)
	case o.clusterMode() && o.apiBurst < 1:
		// client-go reads 0 as its default of 10 and refuses a negative one.
		return fmt.Errorf("--kube-api-burst %d: want at least 1", o.apiBurst)
	case o.nodeName == "":
		return errors.New("--node-name is empty and neither $NODE_NAME nor the hostname is set")
	case o.provisionerKubeconfig != "" && (len(o.provisioners) == 0 || !o.clusterMode()):
		return fmt.Errorf("--provisioner-kubeconfig %s is only used by --provisioners in a cluster: give both, with --kubeconfig or in a pod", o.provisionerKubeconfig)
	case o.metricsAddr != "" && o.metricsAddr == o.statusAddr:
		return fmt.Errorf("--metrics-addr %s is --status-addr: give another address, or leave it empty (the status endpoint serves /metrics too)", o.metricsAddr)
	case o.healthzAddr != "" && (o.healthzAddr == o.statusAddr || o.healthzAddr == o.metricsAddr):
		return fmt.Errorf("--healthz-addr %s is --status-addr or --metrics-addr: give another address, or leave it empty (the status endpoint serves /healthz and /readyz too)", o.healthzAddr)
	case o.rootDir == "":
		return errors.New("--root-dir must not be empty")
	case o.reclaimDelay < 0:
		return fmt.Errorf("--reclaim-delay %v: want 0s or more", o.reclaimDelay)
	case o.csiEndpoint != "" && !o.provisioner(provLocal):
		return fmt.Errorf("--csi-endpoint %s serves the volumes of the local provisioner: give --provisioners %s too", o.csiEndpoint, provLocal)
	case o.checkPeriod < time.Second:
		return fmt.Errorf("--volume-check-period %v: want at least 1s", o.checkPeriod)
	case o.statsPeriod < 0 || (o.statsPeriod > 0 && o.statsPeriod < time.Second):
		return fmt.Errorf("--volume-stats-period %v: want 0s (walks off) or at least 1s", o.statsPeriod)
	}
	if err := o.validateAddrs(); err != nil {
		return err
	}
	return o.validateProvisioners()
}

// validateAddrs checks the endpoints' addresses, and that a socket group
// has a socket to apply to.
func (o options) validateAddrs() error {
	unixSocket := false
	for _, f := range []struct{ name, addr string }{{"status-addr", o.statusAddr}, {"metrics-addr", o.metricsAddr}, {"healthz-addr", o.healthzAddr}} {
		if f.addr == "" && f.name != "status-addr" {
			continue
		}
		a, err := status.ParseAddr(f.addr)
		if err != nil {
			return fmt.Errorf("--%s: %w", f.name, err)
		}
		unixSocket = unixSocket || a.Network == "unix"
	}
	if o.socketGroup != "" && !unixSocket {
		return fmt.Errorf("--status-socket-group %s applies to unix sockets only: give --status-addr unix:///path too", o.socketGroup)
	}
	return nil
}

func (o options) validateProvisioners() error {
	seen := map[string]bool{}
	for _, p := range o.provisioners {
		if p != provLocal && p != provNFSSubdir {
			return fmt.Errorf("--provisioners: unknown provisioner %q: want %s or %s", p, provLocal, provNFSSubdir)
		}
		if seen[p] {
			return fmt.Errorf("--provisioners: %s given twice", p)
		}
		seen[p] = true
	}
	if !seen[provLocal] {
		return nil
	}
	switch root := filepath.Clean(o.localPathRoot); {
	case !filepath.IsAbs(o.localPathRoot):
		return fmt.Errorf("--local-path-root %q: want an absolute path", o.localPathRoot)
	case root == "/":
		return errors.New("--local-path-root must not be /")
	case within(root, filepath.Clean(o.rootDir)) || within(filepath.Clean(o.rootDir), root):
		return fmt.Errorf("--local-path-root %s and --root-dir %s must not contain each other: the agent removes what it set up under --root-dir, and provisioned data must outlive it", root, o.rootDir)
	}
	return nil
}

// provisioner reports whether --provisioners names p.
func (o options) provisioner(p string) bool { return slices.Contains(o.provisioners, p) }

// within reports whether path is dir or below it (both clean).
func within(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
}

func defaultNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	return "default"
}

func defaultNodeName() string {
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	host, _ := os.Hostname()
	return strings.ToLower(host)
}
