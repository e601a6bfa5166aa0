package status

import (
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

// TestAppendPodIsMarshalIndent: appendPod writes the bytes of
// json.MarshalIndent for random statuses that fill every field of Pod,
// Volume, SubPath and Usage by reflection (so a field added later is
// filled too), with strings that need escaping or not, nil and empty
// lists, nil and set pointers, zero and set times in and out of UTC and of
// the years JSON can carry (both then fail).
func TestAppendPodIsMarshalIndent(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	for i := range 20000 {
		var p Pod
		fill(rng, reflect.ValueOf(&p).Elem())
		want, wantErr := json.MarshalIndent(p, "", indent)
		got, err := appendPod(nil, &p)
		if (err != nil) != (wantErr != nil) || (err == nil && string(got) != string(want)) {
			t.Fatalf("status %d: appendPod = %v\n%s\nwant (%v)\n%s", i, err, got, wantErr, want)
		}
	}
}

// fill sets v to a random value of its type.
func fill(rng *rand.Rand, v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(randomString(rng))
	case reflect.Bool:
		v.SetBool(rng.IntN(2) == 0)
	case reflect.Int, reflect.Int64:
		v.SetInt([]int64{0, 1, -1, 7, 1 << 40, -1 << 62}[rng.IntN(6)])
	case reflect.Uint64:
		v.SetUint([]uint64{0, 1, 4096, 1 << 63, ^uint64(0)}[rng.IntN(5)])
	case reflect.Pointer:
		if rng.IntN(2) == 0 {
			v.Set(reflect.New(v.Type().Elem()))
			fill(rng, v.Elem())
		}
	case reflect.Slice:
		if n := rng.IntN(4); n > 0 { // 0: nil
			v.Set(reflect.MakeSlice(v.Type(), n-1, n-1))
			for i := range n - 1 {
				fill(rng, v.Index(i))
			}
		}
	case reflect.Struct:
		if v.Type() == reflect.TypeFor[time.Time]() {
			v.Set(reflect.ValueOf(randomTime(rng)))
			return
		}
		for i := range v.NumField() {
			fill(rng, v.Field(i))
		}
	default:
		panic("fill: no values for " + v.Type().String())
	}
}

func randomString(rng *rand.Rand) string {
	parts := []string{"", "data", "kubernetes.io/configmap", "/var/lib/volume-agent/pods/0b5e/volumes/x", "Mounted",
		`"quoted"`, `back\slash`, "<b>&amp;</b>", "line\nbreak\ttab\r", "\x00\x1f\x7f", "é ü 日本", "\u2028\u2029",
		"\xff\xfe invalid", "  spaced  "}
	s := ""
	for range rng.IntN(3) {
		s += parts[rng.IntN(len(parts))]
	}
	return s
}

func randomTime(rng *rand.Rand) time.Time {
	switch rng.IntN(6) {
	case 0:
		return time.Time{}
	case 1:
		return time.Date(2026, 11, 29, 2, 3, 4, 0, time.FixedZone("X", 3600))
	case 2:
		return time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) // JSON cannot carry it
	case 3:
		return time.Date(2026, 11, 29, 2, 3, 4, 123456789, time.UTC)
	default:
		return time.Unix(rng.Int64N(1<<34), 0).UTC()
	}
}
