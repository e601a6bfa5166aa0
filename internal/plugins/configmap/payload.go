package configmap

import (
	"fmt"
	"os"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/plugins/contentdir"
)

// Payload returns the files a ConfigMap projects: every key of data and
// binaryData (byte for byte), or only the listed items at their paths. cm is
// nil when the ConfigMap does not exist: that gives an empty payload when
// optional and an error otherwise.
func Payload(namespace, name string, cm *v1.ConfigMap, items []v1.KeyToPath, mode os.FileMode, optional bool) (contentdir.Payload, error) {
	what := fmt.Sprintf("configMap %s/%s", namespace, name)
	if cm == nil {
		if optional {
			return contentdir.Payload{}, nil
		}
		return nil, fmt.Errorf("%s not found", what)
	}
	data := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	for k, v := range cm.Data {
		if _, dup := data[k]; dup {
			return nil, fmt.Errorf("%s: key %q is in both data and binaryData", what, k)
		}
		data[k] = []byte(v)
	}
	return contentdir.Project(what, data, items, mode, optional)
}
