package contentdir

// FreshWrites returns how many set-ups have written with WriteNew.
func FreshWrites() int64 { return freshWrites.Load() }
