package usage

import "testing"

// A size limit nothing enforces is the volume's capacity; what is
// available is what the limit still leaves, never more than the file
// system has; without a limit the measurement is as measured.
func TestSizeLimitIsTheCapacity(t *testing.T) {
	const fs = 270 << 30
	for _, tt := range []struct {
		name                    string
		in                      Measurement
		wantCapacity, wantAvail uint64
	}{
		{"no limit", Measurement{CapacityBytes: fs, AvailableBytes: 100 << 30, UsedBytes: 1 << 20}, fs, 100 << 30},
		{"under its limit", Measurement{CapacityBytes: fs, AvailableBytes: 100 << 30, UsedBytes: 4 << 20, SizeLimitBytes: 10 << 20}, 10 << 20, 6 << 20},
		{"over its limit", Measurement{CapacityBytes: fs, AvailableBytes: 100 << 30, UsedBytes: 12 << 20, SizeLimitBytes: 10 << 20}, 10 << 20, 0},
		{"the file system fuller than the limit", Measurement{CapacityBytes: fs, AvailableBytes: 1 << 20, UsedBytes: 4 << 20, SizeLimitBytes: 10 << 20}, 10 << 20, 1 << 20},
	} {
		got := tt.in.withSizeLimit()
		if got.CapacityBytes != tt.wantCapacity || got.AvailableBytes != tt.wantAvail || got.UsedBytes != tt.in.UsedBytes || got.Exceeded() != tt.in.Exceeded() {
			t.Errorf("%s: %+v; want capacity %d, available %d", tt.name, got, tt.wantCapacity, tt.wantAvail)
		}
	}
}
