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
	for _, tc := range numberCases {
		t.Run(tc.name, func(t *testing.T) { tc.run(t, newRegistry(t)) })
	}
}

// numberCases are TestNumberRegistry's subtests, in order; each runs on
// an empty registry of its own.
var numberCases = []struct {
	name string
	run  func(t *testing.T, r registry.NumberRegistry)
}{
	{"unique, stable, shown", numbersUniqueStableShown},
	{"dense one at a time", numbersDenseOneAtATime},
	{"only the holder", numbersOnlyTheHolder},
	{"kept across claims, releases and take-overs", numbersKeptAcrossClaims},
	{"concurrent names", numbersConcurrentNames},
	{"stride", numbersStride},
}

// numClaim claims name for owner (forced or not) and fails the test if it
// cannot.
func numClaim(t *testing.T, r registry.NumberRegistry, name, owner string, force bool) registry.Holder {
	t.Helper()
	h, err := r.Claim(context.Background(), registry.Claim{Name: name, Owner: owner, Force: force, Hostname: "h-" + owner, MachineID: "m-" + owner})
	if err != nil {
		t.Fatalf("claim %s for %s: %v", name, owner, err)
	}
	return h
}

// numAssign gives h's name its node number and fails the test if it
// cannot or if the number is not one a node can have.
func numAssign(t *testing.T, r registry.NumberRegistry, h registry.Holder) uint64 {
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

// numbersUniqueStableShown checks that names get distinct numbers, that
// assigning again gives the same one, and that Get and List show it.
func numbersUniqueStableShown(t *testing.T, r registry.NumberRegistry) {
	ctx := context.Background()
	seen := map[uint64]string{}
	for i := range 5 {
		h := numClaim(t, r, fmt.Sprintf("n%d", i), "o1", false)
		n := numAssign(t, r, h)
		if other, dup := seen[n]; dup {
			t.Fatalf("node number %d given to %s and %s", n, other, h.Name)
		}
		seen[n] = h.Name
		if again := numAssign(t, r, h); again != n {
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
}

// numbersDenseOneAtATime checks that names numbered one after another on
// a new registry get 1, 2, 3, …: with stride S, S-1 such names fit under
// it. (Names numbered at once may leave gaps; they stay unique.)
func numbersDenseOneAtATime(t *testing.T, r registry.NumberRegistry) {
	for i := range 12 {
		h := numClaim(t, r, fmt.Sprintf("d%d", i), "o1", false)
		if n := numAssign(t, r, h); n != uint64(i+1) {
			t.Fatalf("the %d. name numbered one at a time got node number %d, want %d", i+1, n, i+1)
		}
	}
}

// numbersOnlyTheHolder checks that only the name's current claim (owner
// and session) gets it a number.
func numbersOnlyTheHolder(t *testing.T, r registry.NumberRegistry) {
	ctx := context.Background()
	h := numClaim(t, r, "web", "o1", false)
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
}

// numbersKeptAcrossClaims checks that a name keeps its number through a
// new claim, a release and hand-over, and a forced take-over, and that
// no other name gets it.
func numbersKeptAcrossClaims(t *testing.T, r registry.NumberRegistry) {
	ctx := context.Background()
	h := numClaim(t, r, "web", "o1", false)
	n := numAssign(t, r, h)
	h = numClaim(t, r, "web", "o1", false) // a restart: a new session
	if got := numAssign(t, r, h); got != n {
		t.Fatalf("after a new claim: %d, want %d", got, n)
	}
	if err := r.Release(ctx, "web", "o1", h.Reserved); err != nil {
		t.Fatal(err)
	}
	h = numClaim(t, r, "web", "o2", false) // another host takes the released name
	if h.Number != n {
		t.Errorf("the claim's row shows number %d, want %d", h.Number, n)
	}
	if got := numAssign(t, r, h); got != n {
		t.Fatalf("after a hand-over: %d, want %d", got, n)
	}
	h = numClaim(t, r, "web", "o3", true) // a forced take-over
	if got := numAssign(t, r, h); got != n {
		t.Fatalf("after a take-over: %d, want %d", got, n)
	}
	other := numClaim(t, r, "db", "o1", false)
	if got := numAssign(t, r, other); got == n {
		t.Fatalf("another name got web's number %d", n)
	}
}

// numbersConcurrentNames checks that names numbered at once all get
// distinct numbers.
func numbersConcurrentNames(t *testing.T, r registry.NumberRegistry) {
	const names = 16
	hs := make([]registry.Holder, names)
	for i := range hs {
		hs[i] = numClaim(t, r, fmt.Sprintf("c%d", i), "o1", false)
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
}

// numbersStride checks the registry's stride: none at first, invalid
// strides refused without a trace, then set once and never changed.
func numbersStride(t *testing.T, r registry.NumberRegistry) {
	ctx := context.Background()
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
}
