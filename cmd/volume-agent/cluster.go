package main

import (
	"errors"
	"fmt"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/volume-agent/volume-agent/internal/events"
	"github.com/volume-agent/volume-agent/internal/plugins/projected"
	"github.com/volume-agent/volume-agent/internal/populator"
	"github.com/volume-agent/volume-agent/internal/reconciler"
	"github.com/volume-agent/volume-agent/internal/source/apiserver"
	"github.com/volume-agent/volume-agent/internal/tokens"
)

// cluster holds what cluster mode adds: the API source, the token manager
// and the event recorder. A nil *cluster means no cluster.
type cluster struct {
	source *apiserver.Source
	tokens *tokens.Manager // nil with --mint-tokens=false
	events *events.Recorder
	// provisioners are the dynamic provisioners' controllers.
	provisioners map[string]runner
}

// newCluster connects to the API server when --kubeconfig is given or the
// agent runs in a pod; it returns nil otherwise. notifyPod names a pod whose
// token volumes must be computed again; ready says whether a pod is ready,
// for its one SuccessfulMountVolume event.
func newCluster(o options, log *zap.Logger, notify func(), notifyPod func(types.UID), provs *provisioners, ready func(types.UID) bool) (*cluster, error) {
	cfg, err := restConfig(o)
	if cfg == nil || err != nil {
		return nil, err
	}
	if len(cfg.CertData) > 0 && cfg.CertFile == "" {
		// client-go reloads a client certificate named by path (the
		// kubelet's, on kubeadm), not one embedded in the kubeconfig.
		log.Info("the kubeconfig embeds its client certificate: after it is renewed, restart the agent",
			zap.String("kubeconfig", o.kubeconfig))
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	reads, err := kubernetes.NewForConfig(unthrottled(cfg))
	if err != nil {
		return nil, fmt.Errorf("kubernetes client for direct reads: %w", err)
	}
	src, err := apiserver.New(apiserver.Config{
		Client: client, NodeName: o.nodeName, Logger: log, OnChange: notify,
		Reads: reads, ReadTokens: flowcontrol.NewTokenBucketPassiveRateLimiter(o.apiQPS, o.apiBurst),
	})
	if err != nil {
		return nil, err
	}
	// Events get a token bucket of their own, the same size, so that
	// events never delay the lists and watches of a burst of new pods,
	// nor those the events.
	eventClient, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
	if err != nil {
		return nil, fmt.Errorf("kubernetes client for events: %w", err)
	}
	c := &cluster{source: src, events: events.New(events.Config{Client: eventClient, NodeName: o.nodeName, Source: apiserver.Name, Ready: ready})}
	if o.mintTokens {
		// A pod with a token volume is ready only once its token is
		// minted; the lists and watches of its ConfigMaps and Secrets are
		// not on that path (the direct reads are). The token requests
		// get a token bucket of their own, the same size, so that a burst
		// of new pods' watches never queues them.
		tokenClient, err := kubernetes.NewForConfig(rest.CopyConfig(cfg))
		if err != nil {
			return nil, fmt.Errorf("kubernetes client for token requests: %w", err)
		}
		c.tokens = tokens.New(tokens.Config{Client: tokenClient, Logger: log, OnChange: notifyPod})
	}
	if len(o.provisioners) == 0 {
		return c, nil
	}
	provClient := kubernetes.Interface(client)
	if pcfg, err := provisionerConfig(o, log); err != nil {
		return nil, err
	} else if pcfg != nil {
		if provClient, err = kubernetes.NewForConfig(pcfg); err != nil {
			return nil, fmt.Errorf("kubernetes client for the provisioners: %w", err)
		}
	}
	if c.provisioners, err = provs.runners(provClient, o, log); err != nil {
		return nil, err
	}
	return c, nil
}

// provisionerConfig returns the identity of the provisioners' clients, or
// nil for the agent's own. Provisioning watches claims, PVs and
// StorageClasses cluster-wide, which a node identity (the kubelet's
// credentials in --kubeconfig, under the Node authorizer) may not: it gets
// an identity of its own, so that the mounting path never holds those
// rights. It is --provisioner-kubeconfig, else in a pod given --kubeconfig
// the pod's service account, else the agent's own config.
func provisionerConfig(o options, log *zap.Logger) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	switch {
	case o.provisionerKubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", o.provisionerKubeconfig)
	case o.kubeconfig != "" && o.podServiceAccount():
		cfg, err = rest.InClusterConfig()
	default:
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load the provisioners' API server config: %w", err)
	}
	from := "the pod's service account"
	if o.provisionerKubeconfig != "" {
		from = o.provisionerKubeconfig
	}
	log.Info("provisioners use an identity of their own", zap.String("identity", from))
	cfg.QPS, cfg.Burst = o.apiQPS, o.apiBurst
	cfg.UserAgent = "volume-agent/" + o.nodeName + "/provisioner"
	return cfg, nil
}

// restConfig loads --kubeconfig, or the in-cluster config inside a pod.
func restConfig(o options) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	switch {
	case o.kubeconfig != "":
		cfg, err = clientcmd.BuildConfigFromFlags("", o.kubeconfig)
	case o.inPod():
		cfg, err = rest.InClusterConfig()
	default:
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load API server config: %w", err)
	}
	cfg.QPS, cfg.Burst = o.apiQPS, o.apiBurst
	cfg.UserAgent = "volume-agent/" + o.nodeName
	// Every client made from this config is typed and reads and writes
	// built-in types only (pods, nodes, ConfigMaps, Secrets, claims, PVs,
	// StorageClasses, events, TokenRequests): protobuf, as the kubelet
	// speaks, costs both sides less than JSON. JSON stays accepted.
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return cfg, nil
}

// unthrottled returns a copy of cfg whose requests never wait for a
// client-side rate limiter. It is for the API source's direct reads of
// newly referenced ConfigMaps and Secrets: they are made only while a token
// bucket of their own (the size --kube-api-qps and --kube-api-burst give)
// has a token, and skipped otherwise, so they never wait, and never take
// tokens that TokenRequests and events need in a burst of new pods. The
// copy shares the client's connection (client-go keys its transports by
// TLS and dial settings, not by rate limits).
func unthrottled(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.QPS, c.Burst, c.RateLimiter = -1, 0, nil
	return c
}

// tokenSource returns the token manager as the projected plugin wants it:
// a nil interface when tokens are not minted.
func (c *cluster) tokenSource() projected.Tokens {
	if c == nil || c.tokens == nil {
		return nil
	}
	return c.tokens
}

// recorder returns the event recorder, or nil without a cluster.
func (c *cluster) recorder() reconciler.Recorder {
	if c == nil {
		return nil
	}
	return c.events
}

// sizeLimitRecorder returns the event recorder as the size limit
// reporter wants it, or nil without a cluster.
func (c *cluster) sizeLimitRecorder() sizeLimitEvents {
	if c == nil {
		return nil
	}
	return c.events
}

// problemRecorder returns the event recorder as the populator wants it, or
// nil without a cluster.
func (c *cluster) problemRecorder() populator.Recorder {
	if c == nil {
		return nil
	}
	return c.events
}

// forgetPod drops what is cached for a pod that left the desired state.
func (c *cluster) forgetPod(uid types.UID) {
	if c == nil {
		return
	}
	c.events.ForgetPod(uid)
	if c.tokens != nil {
		c.tokens.ForgetPod(uid)
	}
}

// runners lists what runs beside the loops.
func (c *cluster) runners() map[string]runner {
	r := map[string]runner{"event recorder": c.events}
	if c.tokens != nil {
		r["token manager"] = c.tokens
	}
	for name, p := range c.provisioners {
		r[name] = p
	}
	return r
}

var errNothingToServe = errors.New("nothing to serve: give --manifests DIR and/or --kubeconfig FILE (see --help)")

// notifyPod asks the populator for a pass that computes pod uid's token
// volumes again: the token manager names the pod whose token is due.
func (a *agent) notifyPod(uid types.UID) { a.populator.NotifyPod(uid) }
