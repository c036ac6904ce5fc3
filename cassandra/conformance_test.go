package cassandra

import (
	"testing"

	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
)

// TestConformance runs registrytest's conformance suite, which every
// registry.Registry must pass, on the real Cassandra. The subtests share one
// keyspace and one registry: each uses names of its own.
func TestConformance(t *testing.T) {
	_, _, r := oneRegistry(t)
	registrytest.TestRegistry(t, func(*testing.T) registry.Registry { return r })
}

// TestNumberConformance runs the node numbers' conformance suite on the
// real Cassandra, each subtest on a keyspace of its own.
func TestNumberConformance(t *testing.T) {
	registrytest.TestNumberRegistry(t, func(t *testing.T) registry.NumberRegistry { _, _, r := oneRegistry(t); return r })
}
