package binder

import (
	"errors"

	"github.com/volume-agent/volume-agent/internal/provisioner"
)

// withContent is req asking for a volume made from content (nil: req as
// it is).
func withContent(req provisioner.Request, content *contentIntent) (provisioner.Request, error) {
	if content == nil {
		return req, nil
	}
	return req, errors.New("making a volume from a data source is not supported by this build")
}
