package registry_test

import (
	"regexp"
	"testing"

	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/assert"
)

// OwnerID is a short, stable fingerprint: 12 hex digits, the same for the
// same token, different for another, and empty for no owner.
func TestOwnerID(t *testing.T) {
	t.Parallel()
	assert.Empty(t, registry.OwnerID(""))
	a := registry.OwnerID("0123456789abcdef0123456789abcdef")
	assert.Regexp(t, regexp.MustCompile(`^[0-9a-f]{12}$`), a)
	assert.Equal(t, a, registry.OwnerID("0123456789abcdef0123456789abcdef"))
	assert.NotEqual(t, a, registry.OwnerID("0123456789abcdef0123456789abcdee"))
	// The first 12 hex digits of the token's SHA-256.
	assert.Equal(t, "ca978112ca1b", registry.OwnerID("a"))
}
