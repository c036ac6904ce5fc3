package sim

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
)

// liar is a registry that reports done what it did not do, and refuses
// what it should not: the contract checks must catch each.
type liar struct{ backend }

func (l liar) Extend(_ context.Context, name, owner, session string, _, new uint64) (registry.Holder, error) {
	return registry.Holder{Name: name, Owner: owner, Session: session, Reserved: new, State: registry.StateActive}, nil
}

func (l liar) Claim(ctx context.Context, c registry.Claim) (registry.Holder, error) {
	if c.Force {
		h, err := l.backend.Get(ctx, c.Name)
		h.Owner, h.Reserved = c.Owner, 0
		return h, err // the take-over not made, and reported at mark 0
	}
	return registry.Holder{}, fmt.Errorf("%w: %q", engine.ErrNameTaken, c.Name)
}

// TestRegistryContract: what a registry reported done (or refused) is
// checked against its rows, and a registry that lies is a violation.
func TestRegistryContract(t *testing.T) {
	ctx := context.Background()
	mem := registrytest.NewRegistry()
	owner, other := strings.Repeat("a", 32), strings.Repeat("b", 32)
	h, err := mem.Claim(ctx, registry.Claim{Name: "n1", Owner: owner})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mem.Extend(ctx, "n1", owner, h.Session, 0, 300); err != nil {
		t.Fatal(err)
	}
	c := &contract{truth: memCluster{mem}}
	honest := newFaultyRegistry(mem, 0, &armed[bool]{}, c)
	lying := newFaultyRegistry(liar{mem}, 0, &armed[bool]{}, c)

	if _, err := honest.Extend(ctx, "n1", owner, h.Session, 300, 400); err != nil {
		t.Fatal(err)
	}
	if _, err := honest.Claim(ctx, registry.Claim{Name: "n1", Owner: other}); err == nil {
		t.Fatal("a claim of a name held by another owner succeeded")
	}
	if got := c.take(); len(got) != 0 {
		t.Fatalf("an honest registry broke its contract: %q", got)
	}

	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"extend under another session", func() error {
			_, err := lying.Extend(ctx, "n1", owner, "another-session", 400, 500)
			return err
		}, "an Extend of n1 under session"},
		{"a free name refused as taken", func() error {
			_, err := lying.Claim(ctx, registry.Claim{Name: "free", Owner: owner})
			return err
		}, "a claim of free refused as taken"},
		{"a forced take-over below the mark and the floor", func() error {
			_, err := lying.Claim(ctx, registry.Claim{Name: "n1", Owner: other, Force: true, Floor: 1000})
			return err
		}, "a forced take-over of n1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_ = tc.call()
			got := c.take()
			if len(got) != 1 || !strings.Contains(got[0], tc.want) {
				t.Fatalf("want one violation %q, got %q", tc.want, got)
			}
		})
	}
}
