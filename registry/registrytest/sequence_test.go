package registrytest_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
)

// TestDataCentres: views of one registry from two data centres share
// names and sequences but take numbers from ranges of their own; a data
// centre cut off goes on leasing from its ranges under the claim it
// leased with, and every call that needs the cluster's quorum fails
// there and changes nothing.
func TestDataCentres(t *testing.T) {
	ctx := t.Context()
	r := registrytest.NewRegistry()
	dc1, dc2 := r.InDC("dc1"), r.InDC("dc2")
	if dc1.DC() != "dc1" || r.DC() != registrytest.DC {
		t.Fatalf("DC(): %q, %q", dc1.DC(), r.DC())
	}
	h1, err := dc1.Claim(ctx, registry.Claim{Name: "a", Owner: "o1"})
	if err != nil {
		t.Fatal(err)
	}
	h2, err := dc2.Claim(ctx, registry.Claim{Name: "b", Owner: "o2"})
	if err != nil {
		t.Fatal(err)
	}
	h3, err := dc1.Claim(ctx, registry.Claim{Name: "c", Owner: "o3"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dc2.CreateSequence(ctx, "s", 1, 3*registrytest.DCRange); err != nil {
		t.Fatal(err)
	}
	lease := func(v *registrytest.Registry, h registry.Holder, prev registry.SequenceLease, n uint64) (registry.SequenceLease, error) {
		return v.LeaseSequence(ctx, registry.LeaseRequest{Sequence: "s", Name: h.Name, Owner: h.Owner, Session: h.Session,
			PrevFirst: prev.First, PrevLast: prev.Last, Min: n, Size: n})
	}
	l1, err := lease(dc1, h1, registry.SequenceLease{}, 10)
	if err != nil || l1.First != 1 || l1.Last != 10 || l1.DC != "dc1" {
		t.Fatalf("dc1's first lease: %+v, %v", l1, err)
	}
	l2, err := lease(dc2, h2, registry.SequenceLease{}, 10)
	if err != nil || l2.First != registrytest.DCRange+1 || l2.DC != "dc2" {
		t.Fatalf("dc2's first lease: %+v, %v (want a range of its own)", l2, err)
	}
	if got, err := dc1.HostLease(ctx, "s", "b"); err != nil || got != (registry.SequenceLease{}) {
		t.Fatalf("dc1 sees dc2's host lease: %+v, %v", got, err)
	}

	r.SetCut("dc2", true)
	before, err := dc1.SequenceStatus(ctx, "s")
	if err != nil {
		t.Fatalf("dc1's status while dc2 is cut: %v", err)
	}
	rowsBefore, _ := dc1.List(ctx)
	refused := map[string]error{}
	_, refused["claim"] = dc2.Claim(ctx, registry.Claim{Name: "d", Owner: "o4"})
	_, refused["extend"] = dc2.Extend(ctx, "b", "o2", h2.Session, 0, 100)
	refused["touch"] = dc2.Touch(ctx, "b", "o2", h2.Session)
	refused["release"] = dc2.Release(ctx, "b", "o2", 100)
	_, refused["get"] = dc2.Get(ctx, "b")
	_, refused["list"] = dc2.List(ctx)
	_, refused["create"] = dc2.CreateSequence(ctx, "t", 1, 10)
	_, refused["status"] = dc2.SequenceStatus(ctx, "s")
	_, refused["first lease of a claim"] = lease(dc2, h3, registry.SequenceLease{}, 1)
	_, refused["adopt"] = dc2.AdoptLease(ctx, registry.LeaseAdoption{Sequence: "s", Name: "b", Owner: "o2", Session: h2.Session,
		OldSession: h2.Session, First: l2.First, Last: l2.Last, Pos: l2.First})
	for op, err := range refused {
		if !errors.Is(err, snapid.ErrRegistry) {
			t.Errorf("%s in a cut data centre: %v, want ErrRegistry", op, err)
		}
	}
	next, err := lease(dc2, h2, l2, 10)
	if err != nil || next.First != l2.Last+1 {
		t.Fatalf("a lease from the cut data centre's own range: %+v, %v", next, err)
	}
	// Its range used up, it cannot take another from GLOBAL while cut.
	big, err := lease(dc2, h2, next, registrytest.DCRange)
	if !errors.Is(err, snapid.ErrRegistry) || errors.Is(err, snapid.ErrExhausted) {
		t.Fatalf("a lease needing a new range while cut: %+v, %v, want ErrRegistry (not exhausted)", big, err)
	}
	if l, err := lease(dc1, h1, l1, 10); err != nil || l.First != 11 {
		t.Fatalf("dc1 while dc2 is cut: %+v, %v", l, err)
	}
	after, err := dc1.SequenceStatus(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(after.Grants, before.Grants) || after.Next != before.Next {
		t.Errorf("the cut changed GLOBAL: %+v, then %+v", before, after)
	}
	if rowsAfter, _ := dc1.List(ctx); !reflect.DeepEqual(rowsAfter, rowsBefore) {
		t.Errorf("refused calls changed names: %+v, then %+v", rowsBefore, rowsAfter)
	}

	r.SetCut("dc2", false)
	big, err = lease(dc2, h2, next, registrytest.DCRange)
	if err != nil || big.First != 2*registrytest.DCRange+1 || big.DC != "dc2" {
		t.Fatalf("dc2 healed: %+v, %v (want a new range from GLOBAL)", big, err)
	}
	st, err := r.SequenceStatus(ctx, "s")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(st.Leases); n != 2 {
		t.Errorf("status lists %d host leases, want 2: %+v", n, st.Leases)
	}
	if ps := admin.AuditSequences([]registry.SequenceStatus{st}); len(ps) != 0 {
		t.Errorf("audit of the two data centres: %v", ps)
	}
}

// As in Cassandra: a lease reads the name's row only when the host's row
// is not of the request's claim, so a superseded claim goes on leasing
// until the new claim leases (numbers stay unique: they come from ranges);
// a stale previous lease is ErrLeaseMoved before anything else.
func TestLeaseOfSupersededClaim(t *testing.T) {
	ctx := t.Context()
	r := registrytest.NewRegistry()
	if _, err := admin.CreateSequence(ctx, r, "orders", 1, registry.MaxSequence); err != nil {
		t.Fatal(err)
	}
	r.Put(registry.Holder{Name: "web_1", Owner: "own1", Session: "s1", State: registry.StateActive})
	req := func(owner, session string, prev registry.SequenceLease) registry.LeaseRequest {
		return registry.LeaseRequest{Sequence: "orders", Name: "web_1", Owner: owner, Session: session,
			PrevFirst: prev.First, PrevLast: prev.Last, Size: 10, Min: 1}
	}
	l1, err := r.LeaseSequence(ctx, req("own1", "s1", registry.SequenceLease{}))
	if err != nil {
		t.Fatal(err)
	}
	r.Put(registry.Holder{Name: "web_1", Owner: "own2", Session: "s2", State: registry.StateActive}) // taken over
	if _, err := r.LeaseSequence(ctx, req("own1", "s1", registry.SequenceLease{})); !errors.Is(err, registry.ErrLeaseMoved) {
		t.Fatalf("a stale previous lease: %v, want ErrLeaseMoved", err)
	}
	l2, err := r.LeaseSequence(ctx, req("own1", "s1", l1))
	if err != nil || l2.First != l1.Last+1 {
		t.Fatalf("the superseded claim before the new one leased: %+v, %v", l2, err)
	}
	n1, err := r.LeaseSequence(ctx, req("own2", "s2", registry.SequenceLease{}))
	if err != nil || n1.First != l2.Last+1 {
		t.Fatalf("the new claim's first lease: %+v, %v", n1, err)
	}
	if _, err := r.LeaseSequence(ctx, req("own1", "s1", l2)); !errors.Is(err, snapid.ErrNameTaken) {
		t.Fatalf("the superseded claim after the new one leased: %v, want ErrNameTaken", err)
	}
}

// As in Cassandra: a host's lease in a data centre that holds nothing of
// the sequence is read at SERIAL (does the sequence exist?), which a cut
// data centre cannot; a lease is at most an eighth of its range.
func TestHostLeaseInCutDataCentreAndLeaseCap(t *testing.T) {
	ctx := t.Context()
	r := registrytest.NewRegistry()
	if _, err := admin.CreateSequence(ctx, r, "orders", 1, registry.MaxSequence); err != nil {
		t.Fatal(err)
	}
	dc2 := r.InDC("dc2")
	r.SetCut("dc2", true)
	if _, err := dc2.HostLease(ctx, "orders", "web_1"); !errors.Is(err, snapid.ErrRegistry) {
		t.Fatalf("HostLease in a cut data centre holding nothing: %v, want ErrRegistry", err)
	}
	if _, err := dc2.HostLease(ctx, "nosuch", "web_1"); !errors.Is(err, snapid.ErrRegistry) {
		t.Fatalf("HostLease of a missing sequence in a cut data centre: %v, want ErrRegistry", err)
	}
	r.SetCut("dc2", false)
	if _, err := dc2.HostLease(ctx, "nosuch", "web_1"); !errors.Is(err, snapid.ErrNoSequence) {
		t.Fatalf("HostLease of a missing sequence: %v, want ErrNoSequence", err)
	}
	h, err := r.Claim(ctx, registry.Claim{Name: "web_1", Owner: "o"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := r.LeaseSequence(ctx, registry.LeaseRequest{Sequence: "orders", Name: "web_1", Owner: "o", Session: h.Session, Size: registrytest.DCRange, Min: 1})
	if err != nil || l.Last-l.First+1 != registrytest.DCRange/8 {
		t.Fatalf("a lease of a whole range: %+v, %v, want %d numbers (an eighth)", l, err, registrytest.DCRange/8)
	}
}
