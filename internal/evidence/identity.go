package evidence

import (
	"crypto/rand"
	"encoding/hex"

	"k8s.io/apimachinery/pkg/types"
)

// Owner is who data belongs to.
type Owner struct {
	UID types.UID
	// Nonce is the record of creation of an owner the agent made or
	// derived (recorded beside it when it was made); "" for an object
	// whose UID the API server assigned, which is never reused.
	Nonce string
}

// Same reports whether a and b are one owner: both UIDs known and equal,
// and the same record of creation. An owner whose UID is not known is
// nobody's: it matches no one, not even another unknown.
func Same(a, b Owner) bool {
	return a.UID != "" && a.UID == b.UID && a.Nonce == b.Nonce
}

// NewNonce returns a new record of creation: 128 random bits, in hex.
func NewNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (it panics first)
	return hex.EncodeToString(b[:])
}
