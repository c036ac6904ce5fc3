package registrytest

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/snapid/snapid/registry"
)

// The sequence part of the conformance suite, run by TestRegistry on a
// registry that implements registry.SequenceRegistry.
var sequenceCases = []struct {
	name string
	run  func(s *seqSuite)
}{
	{"CreateAndLease", (*seqSuite).createAndLease},
	{"LeaseConditionalOnPrev", (*seqSuite).leaseConditionalOnPrev},
	{"LeaseNeedsTheClaim", (*seqSuite).leaseNeedsTheClaim},
	{"NewClaimTakesOverHostLease", (*seqSuite).newClaimTakesOverHostLease},
	{"NoSequence", (*seqSuite).noSequence},
	{"RecreateNeverLowers", (*seqSuite).recreateNeverLowers},
	{"InvalidSequenceInput", (*seqSuite).invalidInput},
	{"ExhaustedAtMax", (*seqSuite).exhaustedAtMax},
	{"MinConsecutive", (*seqSuite).minConsecutive},
	{"ConcurrentLeases", (*seqSuite).concurrentLeases},
	{"CloseAndAdoptLease", (*seqSuite).closeAndAdopt},
	{"ExhaustAtMaxInt64", (*seqSuite).exhaustAtMaxInt64},
	{"Boundaries", (*seqSuite).boundaries},
	{"Recreate", (*seqSuite).recreate},
	{"ExhaustedSaysWhat", (*seqSuite).exhaustedSaysWhat},
}

type seqSuite struct {
	*suite
	sr registry.SequenceRegistry
}

// host is a claimed node name that leases.
type host struct {
	h    registry.Holder
	prev registry.SequenceLease
}

func (s *seqSuite) create(start, max uint64) string {
	s.t.Helper()
	name := s.name()
	info, err := s.sr.CreateSequence(s.ctx(), name, start, max)
	if err != nil {
		s.t.Fatalf("CreateSequence(%q, %d, %d): %v", name, start, max, err)
	}
	if info.Name != name || info.Start != start || info.Max != max || info.Next != start {
		s.t.Errorf("CreateSequence returned %+v, want start %d, max %d, next %d", info, start, max, start)
	}
	return name
}

func (s *seqSuite) newHost(i int) *host {
	s.t.Helper()
	return &host{h: s.claim(s.name(), owner(i))}
}

func (s *seqSuite) req(seq string, h *host, size, min uint64) registry.LeaseRequest {
	return registry.LeaseRequest{Sequence: seq, Name: h.h.Name, Owner: h.h.Owner, Session: h.h.Session,
		PrevFirst: h.prev.First, PrevLast: h.prev.Last, Size: size, Min: min}
}

// lease leases for h and checks the lease's shape.
func (s *seqSuite) lease(seq string, h *host, size, min uint64) (registry.SequenceLease, error) {
	s.t.Helper()
	l, err := s.sr.LeaseSequence(s.ctx(), s.req(seq, h, size, min))
	if err != nil {
		return l, err
	}
	n := l.Last - l.First + 1
	if l.First == 0 || l.Last < l.First || n < min || n > size || l.Name != h.h.Name || l.Session != h.h.Session || l.Sequence != seq {
		s.t.Errorf("LeaseSequence(size %d, min %d) returned %+v", size, min, l)
	}
	h.prev = l
	return l, nil
}

func (s *seqSuite) mustLease(seq string, h *host, size, min uint64) registry.SequenceLease {
	s.t.Helper()
	l, err := s.lease(seq, h, size, min)
	if err != nil {
		s.t.Fatalf("LeaseSequence: %v", err)
	}
	return l
}

func (s *seqSuite) hostLease(seq, name string) registry.SequenceLease {
	s.t.Helper()
	l, err := s.sr.HostLease(s.ctx(), seq, name)
	if err != nil {
		s.t.Fatalf("HostLease(%q, %q): %v", seq, name, err)
	}
	return l
}

func (s *seqSuite) status(seq string) registry.SequenceStatus {
	s.t.Helper()
	st, err := s.sr.SequenceStatus(s.ctx(), seq)
	if err != nil {
		s.t.Fatalf("SequenceStatus(%q): %v", seq, err)
	}
	return st
}

func (s *seqSuite) createAndLease() {
	seq := s.create(100, 1_000_000)
	a, b := s.newHost(1), s.newHost(2)
	la := s.mustLease(seq, a, 10, 1)
	lb := s.mustLease(seq, b, 10, 1)
	la2 := s.mustLease(seq, a, 10, 1)
	s.leasesApartInBounds([]registry.SequenceLease{la, lb, la2})
	if got := s.hostLease(seq, a.h.Name); got.First != la2.First || got.Last != la2.Last || got.Session != a.h.Session {
		s.t.Errorf("HostLease of a: %+v, want its latest lease [%d, %d]", got, la2.First, la2.Last)
	}
	if got := s.hostLease(seq, s.name()); got.First != 0 {
		s.t.Errorf("HostLease of a host that never leased: %+v, want none", got)
	}
	s.statusAfterLeases(seq, la2)
	list, err := s.sr.ListSequences(s.ctx())
	if err != nil {
		s.t.Fatalf("ListSequences: %v", err)
	}
	if !containsSeq(list, seq) {
		s.t.Errorf("ListSequences lacks %q", seq)
	}
}

// leasesApartInBounds checks createAndLease's leases: each within the
// sequence's [100, 1000000], no two overlapping.
func (s *seqSuite) leasesApartInBounds(all []registry.SequenceLease) {
	s.t.Helper()
	for i, x := range all {
		if x.First < 100 || x.Last > 1_000_000 {
			s.t.Errorf("lease %d [%d, %d] outside [100, 1000000]", i, x.First, x.Last)
		}
		for _, y := range all[i+1:] {
			if x.First <= y.Last && y.First <= x.Last {
				s.t.Errorf("leases [%d, %d] and [%d, %d] overlap", x.First, x.Last, y.First, y.Last)
			}
		}
	}
}

// statusAfterLeases checks createAndLease's sequence status once two
// hosts leased, latest being the last lease: its bounds, GLOBAL's next
// above every lease, and each lease within a range of its data centre,
// each range within a grant of GLOBAL.
func (s *seqSuite) statusAfterLeases(seq string, latest registry.SequenceLease) {
	s.t.Helper()
	st := s.status(seq)
	if st.Start != 100 || st.Max != 1_000_000 || st.Next <= latest.Last || len(st.Leases) != 2 || len(st.Grants) == 0 || len(st.Ranges) == 0 {
		s.t.Errorf("SequenceStatus: %+v", st)
	}
	for _, l := range st.Leases {
		if !inAny(st.Ranges, l.First, l.Last) {
			s.t.Errorf("lease [%d, %d] is in no range of its data centre %v", l.First, l.Last, st.Ranges)
		}
	}
	for _, r := range st.Ranges {
		if !inAny(st.Grants, r.First, r.Last) || r.Last >= st.Next {
			s.t.Errorf("range %+v is not a grant of GLOBAL %v (next %d)", r, st.Grants, st.Next)
		}
	}
}

func inAny(rs []registry.SequenceRange, first, last uint64) bool {
	for _, r := range rs {
		if r.First <= first && last <= r.Last {
			return true
		}
	}
	return false
}

func containsSeq(list []registry.SequenceStatus, name string) bool {
	for _, st := range list {
		if st.Name == name {
			return true
		}
	}
	return false
}

func (s *seqSuite) leaseConditionalOnPrev() {
	seq := s.create(1, 1_000_000)
	a := s.newHost(1)
	l1 := s.mustLease(seq, a, 10, 1)
	stale := *a
	stale.prev = registry.SequenceLease{} // a lease file that predates l1
	got, err := s.sr.LeaseSequence(s.ctx(), s.req(seq, &stale, 10, 1))
	s.wantErr("a lease presenting no previous lease", err, registry.ErrLeaseMoved)
	if got.First != l1.First || got.Last != l1.Last {
		s.t.Errorf("ErrLeaseMoved returned %+v, want the recorded lease [%d, %d]", got, l1.First, l1.Last)
	}
	stale.prev = registry.SequenceLease{First: l1.First, Last: l1.Last + 1}
	_, err = s.sr.LeaseSequence(s.ctx(), s.req(seq, &stale, 10, 1))
	s.wantErr("a lease presenting another previous lease", err, registry.ErrLeaseMoved)
	if got := s.hostLease(seq, a.h.Name); got.First != l1.First || got.Last != l1.Last {
		s.t.Errorf("refused leases changed the host's lease: %+v, want [%d, %d]", got, l1.First, l1.Last)
	}
	l2 := s.mustLease(seq, a, 10, 1)
	if l2.First <= l1.Last {
		s.t.Errorf("the next lease [%d, %d] is not above [%d, %d]", l2.First, l2.Last, l1.First, l1.Last)
	}
}

func (s *seqSuite) leaseNeedsTheClaim() {
	seq := s.create(1, 1_000_000)
	a := s.newHost(1)
	l1 := s.mustLease(seq, a, 10, 1)
	for _, tc := range []struct {
		what string
		mod  func(r *registry.LeaseRequest)
	}{
		{"another session", func(r *registry.LeaseRequest) { r.Session = strings.Repeat("f", 32) }},
		{"another owner", func(r *registry.LeaseRequest) { r.Owner = owner(9) }},
		{"a name nobody claimed", func(r *registry.LeaseRequest) { r.Name = s.name() }},
	} {
		r := s.req(seq, a, 10, 1)
		tc.mod(&r)
		_, err := s.sr.LeaseSequence(s.ctx(), r)
		s.wantErr("a lease with "+tc.what, err, registry.ErrNameTaken)
	}
	if got := s.hostLease(seq, a.h.Name); got.First != l1.First || got.Last != l1.Last || got.Session != a.h.Session {
		s.t.Errorf("refused leases changed the host's lease: %+v", got)
	}
	// The name released and taken over by another owner, whose first
	// lease replaces the host's record: the old claim leases no more.
	if err := s.r.Release(s.ctx(), a.h.Name, a.h.Owner, 0); err != nil {
		s.t.Fatalf("Release: %v", err)
	}
	b := &host{h: s.claim(a.h.Name, owner(2))}
	lb := s.mustLease(seq, b, 10, 1)
	if lb.First <= l1.Last {
		s.t.Errorf("the new holder's lease [%d, %d] is not above the old holder's [%d, %d]", lb.First, lb.Last, l1.First, l1.Last)
	}
	_, err := s.lease(seq, a, 10, 1)
	s.wantErr("a lease by the name's previous holder", err, registry.ErrNameTaken)
}

func (s *seqSuite) newClaimTakesOverHostLease() {
	seq := s.create(1, 1_000_000)
	a := s.newHost(1)
	l1 := s.mustLease(seq, a, 10, 1)
	old := *a
	again := &host{h: s.claim(a.h.Name, owner(1))} // the host's next start: a new session, a fresh lease file
	l2 := s.mustLease(seq, again, 10, 1)
	if l2.First <= l1.Last {
		s.t.Errorf("the new claim's lease [%d, %d] is not above the old one's [%d, %d]", l2.First, l2.Last, l1.First, l1.Last)
	}
	_, err := s.lease(seq, &old, 10, 1)
	s.wantErr("a lease under the superseded session", err, registry.ErrNameTaken)
	if got := s.hostLease(seq, a.h.Name); got.Session != again.h.Session || got.First != l2.First {
		s.t.Errorf("host lease %+v, want the new claim's [%d, %d]", got, l2.First, l2.Last)
	}
}

func (s *seqSuite) noSequence() {
	seq := s.name()
	a := s.newHost(1)
	_, err := s.lease(seq, a, 10, 1)
	s.wantErr("LeaseSequence of a sequence never created", err, registry.ErrNoSequence)
	_, err = s.sr.HostLease(s.ctx(), seq, a.h.Name)
	s.wantErr("HostLease of a sequence never created", err, registry.ErrNoSequence)
	_, err = s.sr.SequenceStatus(s.ctx(), seq)
	s.wantErr("SequenceStatus of a sequence never created", err, registry.ErrNoSequence)
}

func (s *seqSuite) recreateNeverLowers() {
	seq := s.create(1, 1_000_000)
	a := s.newHost(1)
	l1 := s.mustLease(seq, a, 10, 1)
	handed := s.status(seq).Next - 1
	info, err := s.sr.CreateSequence(s.ctx(), seq, 1, 1_000_000)
	if err != nil || info.Next != handed+1 {
		s.t.Errorf("re-creating with the same bounds: %+v, %v; want next %d unchanged", info, err, handed+1)
	}
	_, err = s.sr.CreateSequence(s.ctx(), seq, 1, handed-1)
	s.wantErr("re-creating with a max below what was handed out", err, registry.ErrInvalidSequence)
	if st := s.status(seq); st.Max != 1_000_000 || st.Next != handed+1 {
		s.t.Errorf("a refused re-creation changed GLOBAL: %+v", st.SequenceInfo)
	}
	info, err = s.sr.CreateSequence(s.ctx(), seq, 1, 2_000_000)
	if err != nil || info.Max != 2_000_000 || info.Next != handed+1 {
		s.t.Errorf("raising max: %+v, %v", info, err)
	}
	_, err = s.sr.CreateSequence(s.ctx(), seq, handed+5000, 2_000_000)
	s.wantErr("raising start above what was handed out (ranges and leases below it stay in use)", err, registry.ErrInvalidSequence)
	if st := s.status(seq); st.Start != 1 || st.Next != handed+1 {
		s.t.Errorf("a refused raise of start changed GLOBAL: %+v", st.SequenceInfo)
	}
	b := s.newHost(2)
	if l := s.mustLease(seq, b, 1000, 1); l.First <= l1.Last {
		s.t.Errorf("after re-creation, lease [%d, %d] is not above [%d, %d]", l.First, l.Last, l1.First, l1.Last)
	}
}

func (s *seqSuite) invalidInput() {
	name := s.name()
	for _, tc := range []struct {
		what       string
		name       string
		start, max uint64
		want       error
	}{
		{"an invalid name", "Bad-Name", 1, 10, registry.ErrInvalidName},
		{"an empty name", "", 1, 10, registry.ErrInvalidName},
		{"start 0", name, 0, 10, registry.ErrInvalidSequence},
		{"max below start", name, 10, 9, registry.ErrInvalidSequence},
		{"max above 2^63-1", name, 1, registry.MaxSequence + 1, registry.ErrInvalidSequence},
	} {
		_, err := s.sr.CreateSequence(s.ctx(), tc.name, tc.start, tc.max)
		s.wantErr("CreateSequence with "+tc.what, err, tc.want)
	}
	_, err := s.sr.SequenceStatus(s.ctx(), name)
	s.wantErr("SequenceStatus after refused creations", err, registry.ErrNoSequence)
	seq := s.create(1, 100)
	a := s.newHost(1)
	for _, tc := range []struct{ size, min uint64 }{{0, 0}, {5, 6}, {10, 0}} {
		_, err := s.sr.LeaseSequence(s.ctx(), s.req(seq, a, tc.size, tc.min))
		s.wantErr(fmt.Sprintf("a lease of size %d min %d", tc.size, tc.min), err, registry.ErrInvalidOption)
	}
	r := s.req(seq, a, 10, 1)
	r.Sequence = "Bad"
	_, err = s.sr.LeaseSequence(s.ctx(), r)
	s.wantErr("a lease of an invalid sequence name", err, registry.ErrInvalidName)
	if st := s.status(seq); st.Next != 1 || len(st.Leases) != 0 {
		s.t.Errorf("refused leases changed the sequence: %+v", st)
	}
}

func (s *seqSuite) exhaustedAtMax() {
	const max = 50
	seq := s.create(11, max)
	hosts := []*host{s.newHost(1), s.newHost(2), s.newHost(3)}
	seen := map[uint64]bool{}
	for i := 0; ; i++ {
		h := hosts[i%len(hosts)]
		l, err := s.lease(seq, h, 7, 1)
		if errors.Is(err, registry.ErrExhausted) {
			break
		}
		if err != nil {
			s.t.Fatalf("lease %d: %v", i, err)
		}
		for n := l.First; n <= l.Last; n++ {
			if n < 11 || n > max || seen[n] {
				s.t.Fatalf("lease %d [%d, %d]: %d is outside [11, %d] or leased twice", i, l.First, l.Last, n, max)
			}
			seen[n] = true
		}
	}
	if len(seen) != max-10 {
		s.t.Errorf("%d numbers leased before ErrExhausted, want every one of 11..%d", len(seen), max)
	}
	for _, h := range hosts {
		_, err := s.lease(seq, h, 7, 1)
		s.wantErr("a lease of an exhausted sequence", err, registry.ErrExhausted)
	}
	if st := s.status(seq); st.Next != max+1 {
		s.t.Errorf("GLOBAL next %d after exhaustion, want %d", st.Next, max+1)
	}
}

func (s *seqSuite) minConsecutive() {
	seq := s.create(1, 30)
	a, b := s.newHost(1), s.newHost(2)
	s.mustLease(seq, a, 25, 25)
	l := s.mustLease(seq, b, 5, 5)
	if l.Last-l.First+1 != 5 {
		s.t.Errorf("lease with min 5: [%d, %d]", l.First, l.Last)
	}
	_, err := s.lease(seq, a, 5, 5)
	s.wantErr("a lease of 5 with none left", err, registry.ErrExhausted)
}

func (s *seqSuite) concurrentLeases() {
	seq := s.create(1, registry.MaxSequence)
	const hosts, leases = 6, 5
	got := make([][]registry.SequenceLease, hosts)
	errs := make([]error, hosts)
	hs := make([]*host, hosts)
	for i := range hs {
		hs[i] = s.newHost(i)
	}
	var wg sync.WaitGroup
	for i := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range leases {
				l, err := s.sr.LeaseSequence(s.ctx(), s.req(seq, hs[i], 100, 1))
				if err != nil {
					errs[i] = err
					return
				}
				hs[i].prev = l
				got[i] = append(got[i], l)
			}
		}()
	}
	wg.Wait()
	var all []registry.SequenceLease
	for i := range hosts {
		if errs[i] != nil {
			s.t.Fatalf("host %d: %v", i, errs[i])
		}
		all = append(all, got[i]...)
	}
	for i, x := range all {
		for _, y := range all[i+1:] {
			if x.First <= y.Last && y.First <= x.Last {
				s.t.Errorf("concurrent leases [%d, %d] and [%d, %d] overlap", x.First, x.Last, y.First, y.Last)
			}
		}
	}
}

func (s *seqSuite) closeAndAdopt() {
	seq := s.create(1, 1_000_000)
	a := s.newHost(1)
	l1 := s.mustLease(seq, a, 10, 1)
	pos := l1.First + 3
	bad := l1
	bad.Last++
	s.wantErr("CloseLease of a lease the registry does not record", s.sr.CloseLease(s.ctx(), bad, pos), registry.ErrLeaseMoved)
	if got := s.hostLease(seq, a.h.Name); got.ClosedAt != 0 {
		s.t.Errorf("a refused CloseLease recorded %d", got.ClosedAt)
	}
	if err := s.sr.CloseLease(s.ctx(), l1, pos); err != nil {
		s.t.Fatalf("CloseLease: %v", err)
	}
	if got := s.hostLease(seq, a.h.Name); got.ClosedAt != pos || got.Session != a.h.Session {
		s.t.Errorf("after CloseLease: %+v, want closed at %d", got, pos)
	}
	again := &host{h: s.claim(a.h.Name, owner(1))} // the host's next claim
	adoption := registry.LeaseAdoption{Sequence: seq, Name: a.h.Name, Owner: a.h.Owner, Session: again.h.Session,
		OldSession: a.h.Session, First: l1.First, Last: l1.Last, Pos: pos}
	s.refusedAdoptions(adoption, a)
	if _, err := s.sr.AdoptLease(s.ctx(), adoption); err != nil {
		s.t.Fatalf("AdoptLease: %v", err)
	}
	if got := s.hostLease(seq, a.h.Name); got.Session != again.h.Session || got.First != l1.First || got.Last != l1.Last || got.ClosedAt != 0 {
		s.t.Errorf("after AdoptLease: %+v, want the lease under the new claim, not closed", got)
	}
	_, err := s.sr.AdoptLease(s.ctx(), adoption)
	s.wantErr("a second AdoptLease (the record is no longer closed)", err, registry.ErrLeaseMoved)
	_, err = s.lease(seq, a, 10, 1)
	s.wantErr("a lease under the earlier claim after the adoption", err, registry.ErrNameTaken)
	again.prev = l1
	s.leaseClearsClose(seq, a.h.Name, again, l1)
}

// refusedAdoptions checks that adoptions differing from adoption (of a's
// closed lease) in position, range, old session or claim are refused and
// change nothing.
func (s *seqSuite) refusedAdoptions(adoption registry.LeaseAdoption, a *host) {
	s.t.Helper()
	for _, tc := range []struct {
		what string
		mod  func(x *registry.LeaseAdoption)
		want error
	}{
		{"another position", func(x *registry.LeaseAdoption) { x.Pos++ }, registry.ErrLeaseMoved},
		{"another range", func(x *registry.LeaseAdoption) { x.Last++ }, registry.ErrLeaseMoved},
		{"another old session", func(x *registry.LeaseAdoption) { x.OldSession = strings.Repeat("e", 32) }, registry.ErrLeaseMoved},
		{"a claim that is not the name's", func(x *registry.LeaseAdoption) { x.Session = strings.Repeat("d", 32) }, registry.ErrNameTaken},
	} {
		x := adoption
		tc.mod(&x)
		_, err := s.sr.AdoptLease(s.ctx(), x)
		s.wantErr("AdoptLease with "+tc.what, err, tc.want)
	}
	if got := s.hostLease(adoption.Sequence, a.h.Name); got.Session != a.h.Session || got.ClosedAt != adoption.Pos {
		s.t.Errorf("refused adoptions changed the record: %+v", got)
	}
}

// leaseClearsClose leases for h (the claim of name that adopted l1) above
// l1, closes that lease cleanly, and checks that the next lease clears the
// closed position.
func (s *seqSuite) leaseClearsClose(seq, name string, h *host, l1 registry.SequenceLease) {
	s.t.Helper()
	l2 := s.mustLease(seq, h, 10, 1)
	if l2.First <= l1.Last {
		s.t.Errorf("the lease after the adoption [%d, %d] is not above [%d, %d]", l2.First, l2.Last, l1.First, l1.Last)
	}
	// A lease clears what a clean close recorded.
	if err := s.sr.CloseLease(s.ctx(), l2, l2.First); err != nil {
		s.t.Fatalf("CloseLease: %v", err)
	}
	h.prev = l2
	s.mustLease(seq, h, 10, 1)
	if got := s.hostLease(seq, name); got.ClosedAt != 0 {
		s.t.Errorf("a lease left the closed position %d", got.ClosedAt)
	}
}
