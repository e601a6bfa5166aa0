package contentdir

import (
	"fmt"
	"os"
	"sort"

	v1 "k8s.io/api/core/v1"

	"github.com/volume-agent/volume-agent/internal/atomicwriter"
)

// DefaultMode is the file mode when a volume sets no defaultMode.
const DefaultMode os.FileMode = 0o644

// Mode returns the file mode for a defaultMode field.
func Mode(defaultMode *int32) os.FileMode {
	if defaultMode == nil {
		return DefaultMode
	}
	return os.FileMode(*defaultMode) & os.ModePerm //nolint:gosec // G115: masked to the permission bits
}

// ValidateItems checks a volume's items and defaultMode; field is the
// field path of the source, e.g. "configMap" or "projected.sources[1].secret".
func ValidateItems(field string, items []v1.KeyToPath, defaultMode *int32) error {
	if err := validMode(field+".defaultMode", defaultMode); err != nil {
		return err
	}
	for i, it := range items {
		f := fmt.Sprintf("%s.items[%d]", field, i)
		if it.Key == "" {
			return fmt.Errorf("%s.key is required", f)
		}
		if err := atomicwriter.ValidatePath(it.Path); err != nil {
			return fmt.Errorf("%s.path: %w", f, err)
		}
		if err := validMode(f+".mode", it.Mode); err != nil {
			return err
		}
	}
	return nil
}

func validMode(field string, mode *int32) error {
	if mode != nil && (*mode < 0 || *mode > 0o777) {
		return fmt.Errorf("%s %#o is not between 0 and 0777", field, *mode)
	}
	return nil
}

// Project maps an object's data to files: every key at its own path with
// mode, or only the listed items. A listed key that is missing is an error
// unless optional. what names the object in errors ("configMap ns/name");
// errors name keys, never values.
func Project(what string, data map[string][]byte, items []v1.KeyToPath, mode os.FileMode, optional bool) (Payload, error) {
	payload := Payload{}
	if len(items) == 0 {
		for key, value := range data {
			if err := atomicwriter.ValidatePath(key); err != nil {
				return nil, fmt.Errorf("%s: key %q cannot be a file name: %w", what, key, err)
			}
			payload[key] = atomicwriter.File{Data: value, Mode: mode}
		}
		return payload, nil
	}
	for _, it := range items {
		value, ok := data[it.Key]
		if !ok {
			if optional {
				continue
			}
			return nil, fmt.Errorf("%s has no key %q (keys: %v)", what, it.Key, keys(data))
		}
		m := mode
		if it.Mode != nil {
			m = os.FileMode(*it.Mode) & os.ModePerm //nolint:gosec // G115: masked to the permission bits
		}
		if _, dup := payload[it.Path]; dup {
			return nil, fmt.Errorf("%s: two items write path %q", what, it.Path)
		}
		payload[it.Path] = atomicwriter.File{Data: value, Mode: m}
	}
	return payload, nil
}

func keys(data map[string][]byte) []string {
	out := make([]string, 0, len(data))
	for k := range data {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
