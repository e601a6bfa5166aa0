package provisioner

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FinalizerExternalProvisioner is the finalizer the CSI external-provisioner
// (sig-storage-lib-external-provisioner, AddFinalizer) puts on every Bound
// PV with policy Delete whose pv.kubernetes.io/provisioned-by names its
// driver, CSI or not, and removes only once its Delete succeeded: for an
// in-tree PV, never ("invalid CSI PV").
const FinalizerExternalProvisioner = "external-provisioner.volume.kubernetes.io/finalizer"

// ReasonKeptFromCSIDriver is the event on an in-tree PV this controller
// took back from the CSI driver's external-provisioner (keepFromCSI).
const ReasonKeptFromCSIDriver = "KeptFromCSIDriver"

// legacyName is the other name of provisioner p, which its CSI driver's
// external-provisioner does not know: "" when it has none.
func legacyName(p string) string {
	if p == LocalName {
		return LegacyLocalName
	}
	return ""
}

// claimProvisioner is the provisioner a claim names, as the PV controller
// wrote it: the GA annotation, or the beta one when that is empty.
func claimProvisioner(claim *v1.PersistentVolumeClaim) string {
	if p := claim.Annotations[AnnStorageProvisioner]; p != "" {
		return p
	}
	return claim.Annotations[AnnBetaStorageProvisioner]
}

// leftToCSI reports whether name is the CSI driver's, whose external-
// provisioner serves it: claims and classes naming it exactly are not this
// controller's when Config.CSIDriver is set.
func (c *Controller) leftToCSI(name string) bool {
	return c.cfg.CSIDriver != "" && name == c.cfg.CSIDriver
}

// keepPlan says what makes pv, as it is now, safe from the CSI driver's
// external-provisioner, when it is an in-tree PV of provisioner p on node
// (any node when node is empty): whether its provisioned-by annotation is
// to name the legacy name instead of the driver's (a local PV: the
// external-provisioner then leaves it alone), and whether the external-
// provisioner's finalizer is to go (it can never remove it from an in-tree
// PV, and a PV deleted with it stays Terminating for ever). A CSI PV, or
// another provisioner's or node's, is never touched.
func keepPlan(pv *v1.PersistentVolume, p, legacy, node string) (reannotate, unfinalize bool) {
	by := pv.Annotations[AnnProvisionedBy]
	if legacy == "" || pv.Spec.CSI != nil || Canonical(by) != p || (node != "" && !OnNode(pv, node)) {
		return false, false
	}
	return pv.Spec.Local != nil && by == p, slices.Contains(pv.Finalizers, FinalizerExternalProvisioner)
}

// keepFromCSI applies keepPlan to pv, when the agent serves the CSI
// driver, in one update of the PV as read (its resourceVersion makes the
// API server refuse it once the PV changed; the key is retried with the PV
// as it is then). An update, not a patch: the agent's RBAC grants update
// on PVs, and its admission policy holds both to its own node's PVs. It
// is logged and recorded in an event on the PV, and reports whether it
// updated: the update enqueues the PV again.
func (c *Controller) keepFromCSI(ctx context.Context, pv *v1.PersistentVolume) (bool, error) {
	if c.cfg.CSIDriver == "" {
		return false, nil
	}
	legacy := legacyName(c.name)
	reannotate, unfinalize := keepPlan(pv, c.name, legacy, c.cfg.Node)
	if !reannotate && !unfinalize {
		return false, nil
	}
	kept, did := kept(pv, legacy, reannotate, unfinalize)
	opCtx, cancel := context.WithTimeout(ctx, c.cfg.OpTimeout)
	defer cancel()
	if _, err := c.client.CoreV1().PersistentVolumes().Update(opCtx, kept, metav1.UpdateOptions{}); err != nil {
		return false, fmt.Errorf("PersistentVolume %s: %s: %w", pv.Name, did, err)
	}
	c.log.Info("in-tree volume kept from the CSI driver's external-provisioner", zap.String("pv", pv.Name), zap.String("change", did))
	c.event(pv, v1.EventTypeNormal, ReasonKeptFromCSIDriver, fmt.Sprintf(
		"%s: volume-agent reclaims this in-tree local PV itself; the external-provisioner of CSI driver %s cannot delete a PV that is not a CSI PV",
		did, c.cfg.CSIDriver))
	return true, nil
}

// kept is a copy of pv changed as keepPlan says (its resourceVersion
// kept), and what changed in words.
func kept(pv *v1.PersistentVolume, legacy string, reannotate, unfinalize bool) (*v1.PersistentVolume, string) {
	pv = pv.DeepCopy()
	var did []string
	if reannotate {
		pv.Annotations[AnnProvisionedBy] = legacy
		did = append(did, fmt.Sprintf("annotation %s set to %s", AnnProvisionedBy, legacy))
	}
	if unfinalize {
		pv.Finalizers = slices.DeleteFunc(pv.Finalizers, func(f string) bool { return f == FinalizerExternalProvisioner })
		did = append(did, "finalizer "+FinalizerExternalProvisioner+" removed")
	}
	return pv, strings.Join(did, " and ")
}
