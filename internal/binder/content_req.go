package binder

import (
	"github.com/volume-agent/volume-agent/internal/provisioner"
)

// withContent is req asking for a volume made from content (nil: req as
// it is): the clone's source PersistentVolume, or the restore's snapshot,
// as recorded with the provisioning.
func withContent(req provisioner.Request, content *contentIntent) (provisioner.Request, error) {
	if content == nil {
		return req, nil
	}
	req.Content = &provisioner.Content{Volume: content.Volume, Snapshot: content.Snapshot}
	return req, nil
}
