package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

// options are the command-line flags.
type options struct {
	rootDir      string
	nodeName     string
	manifests    string
	statusAddr   string
	logLevel     string
	logFormat    string
	unprivileged bool
	hostRoot     string
	kubeconfig   string
	mintTokens   bool
	apiQPS       float32
	apiBurst     int
}

const usage = `volume-agent mounts the volumes of the pods on this node under its root directory.

Usage:
  volume-agent --manifests DIR [flags]          # no cluster: pods from a manifest directory
  volume-agent --kubeconfig FILE [flags]        # a node agent of a cluster (in a pod: no flag needed)

Flags:
`

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("volume-agent", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	fs.StringVar(&o.rootDir, "root-dir", "/var/lib/volume-agent", "directory holding pods/<uid>/volumes/<plugin>/<volume> for every pod's volumes")
	fs.StringVar(&o.nodeName, "node-name", defaultNodeName(), "this node's name; pods with spec.nodeName equal to it (or empty, in manifests) are served (default $NODE_NAME, else the hostname)")
	fs.StringVar(&o.manifests, "manifests", "", "directory of Pod, ConfigMap, Secret, PersistentVolume, PersistentVolumeClaim and Node manifests (*.yaml, *.yml, *.json), watched for changes")
	fs.StringVar(&o.statusAddr, "status-addr", "127.0.0.1:9810", "address of the HTTP status endpoint (/healthz, /readyz, /v1/pods, /metrics)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&o.logFormat, "log-format", "console", "log format: console or json")
	fs.BoolVar(&o.unprivileged, "unprivileged", false, "run without root: mount nothing, so memory-backed emptyDir, secret and projected volumes are written to disk instead of tmpfs")
	fs.StringVar(&o.hostRoot, "host-root", "/", "where the host's root file system is visible to the agent (e.g. /host in a container); hostPath volumes are checked below it")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig of the API server to watch pods bound to --node-name from; inside a pod the in-cluster config is used without it")
	fs.BoolVar(&o.mintTokens, "mint-tokens", true, "mint service account tokens for projected serviceAccountToken sources (TokenRequest API); when false such volumes fail")
	qps := fs.Float64("kube-api-qps", 50, "queries per second to the API server")
	fs.IntVar(&o.apiBurst, "kube-api-burst", 100, "burst of queries to the API server")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.apiQPS = float32(*qps)
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return o, o.validate()
}

func (o options) validate() error {
	switch {
	case o.manifests == "" && o.kubeconfig == "" && os.Getenv("KUBERNETES_SERVICE_HOST") == "":
		return errNothingToServe
	case o.nodeName == "":
		return errors.New("--node-name is empty and neither $NODE_NAME nor the hostname is set")
	case o.rootDir == "":
		return errors.New("--root-dir must not be empty")
	}
	return nil
}

func defaultNodeName() string {
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	host, _ := os.Hostname()
	return strings.ToLower(host)
}
