package main

import (
	"context"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// agentNode is the node the agent serves with -alternate: a Node object
// with no kubelet, so that the pods of the agent's bursts are the agent's
// alone and those of the kubelet's (on benchNode) the kubelet's alone.
const agentNode = "bench-agent"

// burstOf says whose burst a round of the kubelet scenario is.
type burstOf int

const (
	bothAtOnce   burstOf = iota // the same pods for both, at once (the default)
	kubeletAlone                // pods of benchNode: the agent has none
	agentAlone                  // pods of agentNode: the kubelet has none
)

// createAgentNode makes the agent's own Node object for -alternate (as
// -without-kubelet makes benchNode's): its identity, system:node:<name>,
// may then read the pods bound to it and mint their tokens.
func (k *sideBySide) createAgentNode() {
	node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: agentNode}}
	if _, err := k.client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		k.r.Fatalf("node %s: %v", agentNode, err)
	}
	k.agentNode = agentNode
}

// alternately runs one burst of mix m for the kubelet alone, then one for
// the agent alone (the other idle meanwhile), in the other order on odd
// rounds, and returns both as one row.
func (k *sideBySide) alternately(round int, m kubeletMix) kubeletRound {
	var kr, ar kubeletRound
	if round%2 == 0 {
		kr = k.round(round, m, kubeletAlone)
		ar = k.round(round, m, agentAlone)
	} else {
		ar = k.round(round, m, agentAlone)
		kr = k.round(round, m, kubeletAlone)
	}
	rr := mergeAlternate(kr, ar)
	k.r.Logf("bench: alternately, set-up agent %.1f/%.1f ms, kubelet %.1f/%.1f ms (p50/p99)", rr.Agent.P50, rr.Agent.P99, rr.Kubelet.P50, rr.Kubelet.P99)
	return rr
}

// mergeAlternate makes one row of the kubelet's burst kr and the agent's
// ar: the kubelet's figures from kr, the agent's from ar, their ratios.
func mergeAlternate(kr, ar kubeletRound) kubeletRound {
	rr := kr
	rr.Alternate = true
	rr.Agent, rr.agentLat, rr.AgentDown, rr.agentDown = ar.Agent, ar.agentLat, ar.AgentDown, ar.agentDown
	rr.AgentSetupWindowS, rr.AgentSetupCPU = ar.SetupWindowS, ar.SetupCPU
	rr.AgentTeardownWindow, rr.AgentTeardownCPU = ar.TeardownWindow, ar.TeardownCPU
	rr.AgentShare = ar.AgentShare
	rr.RatioP50, rr.RatioP99 = ratio(rr.Kubelet.P50, rr.Agent.P50), ratio(rr.Kubelet.P99, rr.Agent.P99)
	rr.DownRatioP50 = ratio(rr.KubeletDown.P50, rr.AgentDown.P50)
	return rr
}
