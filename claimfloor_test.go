package snapid_test

import (
	"context"
	"errors"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// extendFails is a registry whose claims stand and whose extensions
// fail: an Open fails right after its claim.
type extendFails struct{ registry.Registry }

func (extendFails) Extend(ctx context.Context, name, owner, session string, from, to uint64) (registry.Holder, error) {
	return registry.Holder{}, errors.New("extendFails: no extension")
}

// A standalone host that handed out numbers joins a registry, and its
// Open fails after the claim stood: the registry's mark already covers
// the numbers it handed out, so that nobody (a take-over, an audit) reads
// a mark below them.
func TestClaimCoversNumbersHandedOutBeforeTheRegistry(t *testing.T) {
	h := newSeqHost(t, "cf")
	g, err := Open(h.path, h.name, WithBindingDir(t.TempDir()))
	require.NoError(t, err)
	first, err := g.NextN(300)
	require.NoError(t, err)
	require.NoError(t, g.Close())
	last := first + 299

	reg := registrytest.NewRegistry()
	_, err = Open(h.path, h.name, WithRegistry(extendFails{reg}), WithHostInfo(h.info), WithRegistryTimeout(2*time.Second))
	require.Error(t, err, "the Open cannot extend")
	row, err := reg.Get(context.Background(), h.name)
	require.NoError(t, err, "the claim stood")
	require.GreaterOrEqual(t, row.Reserved, last, "the registry's mark is below numbers the host handed out before it joined")
}
