package registrytest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/snapid/snapid/registry"
)

// TestNumberRegistry is the conformance suite of registry.NumberRegistry:
// every implementation must pass it. newRegistry returns an empty
// registry (node numbers and stride included) for each subtest.
func TestNumberRegistry(t *testing.T, newRegistry func(*testing.T) registry.NumberRegistry) {
	claim := func(t *testing.T, r registry.NumberRegistry, name, owner string, force bool) registry.Holder {
		t.Helper()
		h, err := r.Claim(context.Background(), registry.Claim{Name: name, Owner: owner, Force: force, Hostname: "h-" + owner, MachineID: "m-" + owner})
		if err != nil {
			t.Fatalf("claim %s for %s: %v", name, owner, err)
		}
		return h
	}
	assign := func(t *testing.T, r registry.NumberRegistry, h registry.Holder) uint64 {
		t.Helper()
		n, err := r.AssignNumber(context.Background(), h.Name, h.Owner, h.Session)
		if err != nil {
			t.Fatalf("AssignNumber(%s): %v", h.Name, err)
		}
		if n == 0 || n > registry.MaxNodeNumber {
			t.Fatalf("AssignNumber(%s) = %d: not 1 to %d", h.Name, n, uint64(registry.MaxNodeNumber))
		}
		return n
	}
	t.Run("unique, stable, shown", func(t *testing.T) {
		ctx := context.Background()
		r := newRegistry(t)
		seen := map[uint64]string{}
		for i := range 5 {
			h := claim(t, r, fmt.Sprintf("n%d", i), "o1", false)
			n := assign(t, r, h)
			if other, dup := seen[n]; dup {
				t.Fatalf("node number %d given to %s and %s", n, other, h.Name)
			}
			seen[n] = h.Name
			if again := assign(t, r, h); again != n {
				t.Fatalf("AssignNumber(%s) again = %d, first %d", h.Name, again, n)
			}
			got, err := r.Get(ctx, h.Name)
			if err != nil || got.Number != n {
				t.Fatalf("Get(%s).Number = %d (%v), want %d", h.Name, got.Number, err, n)
			}
		}
		rows, err := r.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, row := range rows {
			if seen[row.Number] != row.Name {
				t.Errorf("List shows %s with number %d", row.Name, row.Number)
			}
		}
	})
	t.Run("dense one at a time", func(t *testing.T) {
		// Names numbered one after another on a new registry get 1, 2,
		// 3, …: with stride S, S-1 such names fit under it. (Names
		// numbered at once may leave gaps; they stay unique.)
		r := newRegistry(t)
		for i := range 12 {
			h := claim(t, r, fmt.Sprintf("d%d", i), "o1", false)
			if n := assign(t, r, h); n != uint64(i+1) {
				t.Fatalf("the %d. name numbered one at a time got node number %d, want %d", i+1, n, i+1)
			}
		}
	})
	t.Run("only the holder", func(t *testing.T) {
		ctx := context.Background()
		r := newRegistry(t)
		h := claim(t, r, "web", "o1", false)
		for _, tc := range []struct{ owner, session string }{{"o2", h.Session}, {"o1", "not-the-session"}} {
			if _, err := r.AssignNumber(ctx, "web", tc.owner, tc.session); !errors.Is(err, registry.ErrNameTaken) {
				t.Errorf("AssignNumber by owner %s session %s: %v, want ErrNameTaken", tc.owner, tc.session, err)
			}
		}
		if _, err := r.AssignNumber(ctx, "nosuch", "o1", h.Session); !errors.Is(err, registry.ErrNameTaken) {
			t.Errorf("AssignNumber of a name without a row: %v, want ErrNameTaken", err)
		}
		if got, err := r.Get(ctx, "web"); err != nil || got.Number != 0 {
			t.Errorf("refused calls gave web number %d (%v)", got.Number, err)
		}
	})
	t.Run("kept across claims, releases and take-overs", func(t *testing.T) {
		ctx := context.Background()
		r := newRegistry(t)
		h := claim(t, r, "web", "o1", false)
		n := assign(t, r, h)
		h = claim(t, r, "web", "o1", false) // a restart: a new session
		if got := assign(t, r, h); got != n {
			t.Fatalf("after a new claim: %d, want %d", got, n)
		}
		if err := r.Release(ctx, "web", "o1", h.Reserved); err != nil {
			t.Fatal(err)
		}
		h = claim(t, r, "web", "o2", false) // another host takes the released name
		if h.Number != n {
			t.Errorf("the claim's row shows number %d, want %d", h.Number, n)
		}
		if got := assign(t, r, h); got != n {
			t.Fatalf("after a hand-over: %d, want %d", got, n)
		}
		h = claim(t, r, "web", "o3", true) // a forced take-over
		if got := assign(t, r, h); got != n {
			t.Fatalf("after a take-over: %d, want %d", got, n)
		}
		other := claim(t, r, "db", "o1", false)
		if got := assign(t, r, other); got == n {
			t.Fatalf("another name got web's number %d", n)
		}
	})
	t.Run("concurrent names", func(t *testing.T) {
		r := newRegistry(t)
		const names = 16
		hs := make([]registry.Holder, names)
		for i := range hs {
			hs[i] = claim(t, r, fmt.Sprintf("c%d", i), "o1", false)
		}
		got := make([]uint64, names)
		errs := make([]error, names)
		var wg sync.WaitGroup
		for i := range hs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i], errs[i] = r.AssignNumber(context.Background(), hs[i].Name, hs[i].Owner, hs[i].Session)
			}()
		}
		wg.Wait()
		seen := map[uint64]int{}
		for i := range hs {
			if errs[i] != nil {
				t.Fatalf("AssignNumber(%s): %v", hs[i].Name, errs[i])
			}
			if j, dup := seen[got[i]]; dup {
				t.Fatalf("node number %d given to %s and %s", got[i], hs[j].Name, hs[i].Name)
			}
			seen[got[i]] = i
		}
	})
	t.Run("stride", func(t *testing.T) {
		ctx := context.Background()
		r := newRegistry(t)
		if s, err := r.Stride(ctx); err != nil || s != 0 {
			t.Fatalf("Stride of a new registry: %d, %v", s, err)
		}
		for _, bad := range []uint64{0, 1, registry.MaxNodeNumber + 2} {
			if _, err := r.SetStride(ctx, bad); !errors.Is(err, registry.ErrInvalidOption) {
				t.Errorf("SetStride(%d): %v, want ErrInvalidOption", bad, err)
			}
		}
		if s, err := r.Stride(ctx); err != nil || s != 0 {
			t.Fatalf("refused strides recorded one: %d, %v", s, err)
		}
		if s, err := r.SetStride(ctx, 1000); err != nil || s != 1000 {
			t.Fatalf("SetStride(1000): %d, %v", s, err)
		}
		if s, err := r.SetStride(ctx, 1000); err != nil || s != 1000 {
			t.Fatalf("SetStride(1000) again: %d, %v", s, err)
		}
		if s, err := r.SetStride(ctx, 10); !errors.Is(err, registry.ErrStrideMismatch) || s != 1000 {
			t.Fatalf("SetStride(10) after 1000: %d, %v, want 1000 and ErrStrideMismatch", s, err)
		}
		if s, err := r.Stride(ctx); err != nil || s != 1000 {
			t.Fatalf("Stride after a refused change: %d, %v", s, err)
		}
	})
}
