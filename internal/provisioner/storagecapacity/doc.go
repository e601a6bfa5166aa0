// Package storagecapacity tells kube-scheduler where the local provisioner
// has room: for its node and each StorageClass of the provisioner, one
// CSIStorageCapacity object whose capacity and maximumVolumeSize are what
// the node can still provision. The scheduler reads them for a pod whose
// claim waits for its first consumer when a CSIDriver object of the
// provisioner's name says storageCapacity: true; the Publisher checks that
// object exists and creates it when it may.
//
// The objects are named after their node and class, so a restarted agent
// updates the ones it made; each is owned by its Node, so the garbage
// collector removes them with it. What the node has room for is measured
// when a volume is made, grown or deleted (Publisher.Changed) and once a
// minute for what other writers take; an update is sent only when the
// figure moved by more than a small share, so a busy file system does not
// become API traffic. A figure that cannot be measured is never published
// as zero: the objects keep the last one.
package storagecapacity
