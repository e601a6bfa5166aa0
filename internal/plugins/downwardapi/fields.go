package downwardapi

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/atomicwriter"
	"github.com/volume-agent/volume-agent/internal/plugins/contentdir"
)

// subscripted matches metadata.labels['key'] and metadata.annotations['key'].
var subscripted = regexp.MustCompile(`^metadata\.(labels|annotations)\['([^']+)'\]$`)

// ValidateItems checks a downwardAPI item list; field is its field path.
func ValidateItems(field string, pod *v1.Pod, items []v1.DownwardAPIVolumeFile, defaultMode *int32) error {
	if err := contentdir.ValidateItems(field, nil, defaultMode); err != nil {
		return err
	}
	for i, it := range items {
		f := fmt.Sprintf("%s.items[%d]", field, i)
		if err := validateItem(f, pod, it); err != nil {
			return err
		}
	}
	return nil
}

func validateItem(f string, pod *v1.Pod, it v1.DownwardAPIVolumeFile) error {
	if err := atomicwriter.ValidatePath(it.Path); err != nil {
		return fmt.Errorf("%s.path: %w", f, err)
	}
	if it.Mode != nil && (*it.Mode < 0 || *it.Mode > 0o777) {
		return fmt.Errorf("%s.mode %#o is not between 0 and 0777", f, *it.Mode)
	}
	switch {
	case it.FieldRef != nil && it.ResourceFieldRef != nil:
		return fmt.Errorf("%s: fieldRef and resourceFieldRef are mutually exclusive", f)
	case it.FieldRef != nil:
		_, err := FieldValue(pod, it.FieldRef.FieldPath)
		return prefix(f+".fieldRef", err)
	case it.ResourceFieldRef != nil:
		_, err := resourceValue(pod, v1.ResourceList{}, it.ResourceFieldRef)
		return prefix(f+".resourceFieldRef", err)
	}
	return fmt.Errorf("%s: one of fieldRef or resourceFieldRef is required", f)
}

func prefix(f string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", f, err)
	}
	return nil
}

// Payload returns the files of a downwardAPI item list.
func Payload(pod *v1.Pod, allocatable v1.ResourceList, items []v1.DownwardAPIVolumeFile, mode os.FileMode) (contentdir.Payload, error) {
	payload := contentdir.Payload{}
	for i, it := range items {
		value, err := itemValue(pod, allocatable, it)
		if err != nil {
			return nil, fmt.Errorf("downwardAPI items[%d] (%s): %w", i, it.Path, err)
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode) & os.ModePerm //nolint:gosec // G115: masked to the permission bits
		}
		payload[it.Path] = atomicwriter.File{Data: []byte(value), Mode: m}
	}
	return payload, nil
}

func itemValue(pod *v1.Pod, allocatable v1.ResourceList, it v1.DownwardAPIVolumeFile) (string, error) {
	if it.FieldRef != nil {
		return FieldValue(pod, it.FieldRef.FieldPath)
	}
	if it.ResourceFieldRef != nil {
		return resourceValue(pod, allocatable, it.ResourceFieldRef)
	}
	return "", fmt.Errorf("one of fieldRef or resourceFieldRef is required")
}

// FieldValue renders one pod field as the kubelet does in a volume (and
// in an env var: subPathExpr uses it for the metadata fields).
func FieldValue(pod *v1.Pod, path string) (string, error) {
	if m := subscripted.FindStringSubmatch(path); m != nil {
		if m[1] == "labels" {
			return pod.Labels[m[2]], nil
		}
		return pod.Annotations[m[2]], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "metadata.labels":
		return formatMap(pod.Labels), nil
	case "metadata.annotations":
		return formatMap(pod.Annotations), nil
	}
	return "", fmt.Errorf("fieldPath %q is not supported in volumes (use metadata.name, metadata.namespace, metadata.uid, metadata.labels, metadata.annotations or a ['key'] of the last two)", path)
}

// formatMap renders a map as sorted key="value" lines, values quoted.
func formatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	lines := make([]string, 0, len(keys))
	for _, k := range keys {
		lines = append(lines, k+"="+strconv.Quote(m[k]))
	}
	return strings.Join(lines, "\n")
}
