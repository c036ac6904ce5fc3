package registry

import (
	"crypto/sha256"
	"encoding/hex"
)

// OwnerID returns the fingerprint of an owner token that audits show in
// its place: the first 12 hex digits of its SHA-256, or "" for no owner.
func OwnerID(owner string) string {
	if owner == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(owner))
	return hex.EncodeToString(sum[:6])
}
