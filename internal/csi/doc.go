// Package csi serves the local provisioner's volumes to a stock kubelet as
// the CSI driver local.volume-agent.io: the Identity, Controller and Node
// services on one unix socket, on every node, for the volumes of that
// node (as node-local drivers do: the external-provisioner runs in its
// node-deployment mode beside each agent).
//
// The storage work goes through internal/provisioner/local's lower-level
// API, as the agent's own provisioning does: one code path. The driver
// keeps a record of each volume it made under <local path root>/.csi
// (written durably before the volume is made), which is what it knows a
// volume ID by: an ID without a record is not one of its volumes.
// So with snapshots (records under <local path root>/.csi/snapshots,
// written before the snapshot is taken): the capacity backend also holds
// manifest mode's snapshots, which no CSI call lists, restores or
// deletes.
//
// Nothing is deleted before the reclaim delay (--reclaim-delay) has
// passed since the first DeleteVolume or DeleteSnapshot asked for it: the
// first call records the time (deletionOf decides) and is refused, a call
// after it deletes through the local provisioner, which refuses a volume
// a mount shows and a snapshot a volume is being made from.
//
// The volume ID is the volume's name under the root; a snapshot ID is
// the capacity backend's name of the snapshot. Every ID is checked (one
// path element, not hidden) before anything is touched.
package csi
