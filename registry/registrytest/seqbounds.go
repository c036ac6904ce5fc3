package registrytest

import (
	"errors"
	"fmt"
	"math"

	"github.com/snapid/snapid/registry"
)

// The conformance suite's sequence cases at the numeric boundaries: 2^63-1
// (the largest number a registry stores), and re-creating a sequence.

// exhaustAtMaxInt64 exhausts a sequence whose max is 2^63-1 over several
// leases of several hosts: every number from start to 2^63-1 exactly once,
// none below start, then ErrExhausted for every host and GLOBAL's next at
// 2^63 (a registry storing max+1 in a signed column wraps it to -2^63 and
// hands out numbers again).
func (s *seqSuite) exhaustAtMaxInt64() {
	const count = 40
	start := uint64(registry.MaxSequence - count + 1)
	seq := s.create(start, registry.MaxSequence)
	hosts := []*host{s.newHost(1), s.newHost(2), s.newHost(3)}
	seen := map[uint64]bool{}
	var last uint64
	for i := 0; i < 4*count; i++ {
		l, err := s.lease(seq, hosts[i%len(hosts)], 3, 1)
		if errors.Is(err, registry.ErrExhausted) {
			break
		}
		if err != nil {
			s.t.Fatalf("lease %d: %v", i, err)
		}
		last = max(last, s.leasedOnce(i, l, start, seen))
	}
	if len(seen) != count || last != registry.MaxSequence {
		s.t.Errorf("%d numbers leased before ErrExhausted, the highest %d; want %d, up to 2^63-1", len(seen), last, count)
	}
	s.usedUpAtMaxInt64(seq, hosts, start)
}

// leasedOnce records the numbers of lease i, l, in seen, failing the test
// for a number below start or leased before, and returns the highest (0
// for none).
func (s *seqSuite) leasedOnce(i int, l registry.SequenceLease, start uint64, seen map[uint64]bool) (last uint64) {
	s.t.Helper()
	for n := l.First; n >= l.First && n <= l.Last; n++ {
		if n < start || seen[n] {
			s.t.Fatalf("lease %d [%d, %d]: %d is below start %d or leased twice", i, l.First, l.Last, n, start)
		}
		seen[n] = true
		last = max(last, n)
		if n == math.MaxUint64 {
			break
		}
	}
	return last
}

// usedUpAtMaxInt64 checks sequence seq (from start) once used up to
// 2^63-1: every host's lease is ErrExhausted, GLOBAL's next is 2^63 and
// every range's next is its last+1, and re-creating it keeps it used up.
func (s *seqSuite) usedUpAtMaxInt64(seq string, hosts []*host, start uint64) {
	s.t.Helper()
	for _, h := range hosts {
		_, err := s.lease(seq, h, 3, 1)
		s.wantErr("a lease of a sequence used up to 2^63-1", err, registry.ErrExhausted)
	}
	st := s.status(seq)
	if st.Next != registry.MaxSequence+1 || st.Start != start || st.Max != registry.MaxSequence {
		s.t.Errorf("GLOBAL %+v after exhaustion, want next 2^63", st.SequenceInfo)
	}
	for _, rg := range st.Ranges {
		if rg.Next != rg.Last+1 {
			s.t.Errorf("range %+v after exhaustion: next is not last+1", rg)
		}
	}
	info, err := s.sr.CreateSequence(s.ctx(), seq, start, registry.MaxSequence)
	if err != nil || info.Next != registry.MaxSequence+1 {
		s.t.Errorf("re-creating the used-up sequence: %+v, %v; want next 2^63", info, err)
	}
	_, err = s.lease(seq, hosts[0], 1, 1)
	s.wantErr("a lease after re-creating the used-up sequence", err, registry.ErrExhausted)
}

// boundaries creates and leases at 0, 1, max-1, max, 2^63-1, 2^63 and
// 2^64-1.
func (s *seqSuite) boundaries() {
	const top = registry.MaxSequence
	for _, tc := range []struct {
		start, max uint64
		ok         bool
	}{
		{0, 0, false}, {0, 1, false}, {1, 0, false}, {1, 1, true}, {top - 1, top, true}, {top, top, true},
		{top, top - 1, false}, {1, top + 1, false}, {top + 1, top + 1, false}, {1, math.MaxUint64, false},
		{math.MaxUint64, math.MaxUint64, false},
	} {
		s.createAtBounds(tc.start, tc.max, tc.ok)
	}
	s.leaseSizes()
}

// createAtBounds creates a sequence of [start, max]: refused with
// ErrInvalidSequence and no trace unless ok; else leased one number at a
// time, it hands out every number from start to max, then ErrExhausted.
func (s *seqSuite) createAtBounds(start, max uint64, ok bool) {
	s.t.Helper()
	what := fmt.Sprintf("CreateSequence(start %d, max %d)", start, max)
	name := s.name()
	info, err := s.sr.CreateSequence(s.ctx(), name, start, max)
	if !ok {
		s.wantErr(what, err, registry.ErrInvalidSequence)
		_, err := s.sr.SequenceStatus(s.ctx(), name)
		s.wantErr(what+" then SequenceStatus", err, registry.ErrNoSequence)
		return
	}
	if err != nil || info.Start != start || info.Max != max || info.Next != start {
		s.t.Errorf("%s: %+v, %v", what, info, err)
		return
	}
	got := s.leaseOneByOne(what, name, 3)
	if want := numbersIn(start, max); fmt.Sprint(got) != fmt.Sprint(want) {
		s.t.Errorf("%s: leased %v, want %v then ErrExhausted", what, got, want)
	}
	if st := s.status(name); st.Next != max+1 {
		s.t.Errorf("%s: GLOBAL next %d after exhaustion, want %d", what, st.Next, max+1)
	}
}

// leaseOneByOne leases up to times single numbers of sequence name for a
// new host, stopping at ErrExhausted, and returns them.
func (s *seqSuite) leaseOneByOne(what, name string, times int) []uint64 {
	s.t.Helper()
	h := s.newHost(1)
	var got []uint64
	for range times {
		l, err := s.lease(name, h, 1, 1)
		if errors.Is(err, registry.ErrExhausted) {
			break
		}
		if err != nil {
			s.t.Fatalf("%s: lease: %v", what, err)
		}
		got = append(got, l.First)
	}
	return got
}

// numbersIn returns every number from start to max (none for start 0),
// stopping at max even when max is 2^64-1.
func numbersIn(start, max uint64) []uint64 {
	want := []uint64{}
	for n := start; n <= max && n != 0; n++ {
		want = append(want, n)
		if n == max {
			break
		}
	}
	return want
}

// leaseSizes leases sizes from 0 to 2^64-1 of a sequence of [1, 2^63-1]:
// 0 and sizes above 2^63-1 are ErrInvalidOption, the others give a lease
// of at most the size.
func (s *seqSuite) leaseSizes() {
	const top = registry.MaxSequence
	seq := s.create(1, top)
	h := s.newHost(2)
	for _, tc := range []struct {
		size uint64
		ok   bool
	}{{0, false}, {1, true}, {top - 1, true}, {top, true}, {top + 1, false}, {math.MaxUint64, false}} {
		r := s.req(seq, h, tc.size, 1)
		l, err := s.sr.LeaseSequence(s.ctx(), r)
		if !tc.ok {
			s.wantErr(fmt.Sprintf("a lease of size %d", tc.size), err, registry.ErrInvalidOption)
			continue
		}
		if err != nil || l.First == 0 || l.Last < l.First || l.Last-l.First+1 > tc.size {
			s.t.Errorf("a lease of size %d: %+v, %v", tc.size, l, err)
			continue
		}
		h.prev = l
	}
}

// recreate checks re-creating: max is lowered only down to what data
// centres' ranges cover, and start is raised only before any number was
// handed out (ranges and leases below it would stay in use).
func (s *seqSuite) recreate() {
	seq := s.create(1, math.MaxInt32)
	raised, err := s.sr.CreateSequence(s.ctx(), seq, 5_000_000, math.MaxInt32)
	if err != nil || raised.Next != 5_000_000 || raised.Max != math.MaxInt32 {
		s.t.Errorf("raising start before any lease: %+v, %v; want next 5000000", raised, err)
	}
	h := s.newHost(1)
	l := s.mustLease(seq, h, 10, 1)
	if l.First < 5_000_000 {
		s.t.Errorf("lease [%d, %d] below the raised start", l.First, l.Last)
	}
	before := s.status(seq)
	_, err = s.sr.CreateSequence(s.ctx(), seq, before.Next+1, math.MaxInt32)
	s.wantErr("raising start once numbers were handed out", err, registry.ErrInvalidSequence)
	_, err = s.sr.CreateSequence(s.ctx(), seq, 5_000_001, math.MaxInt32)
	s.wantErr("raising start within handed-out ranges", err, registry.ErrInvalidSequence)
	_, err = s.sr.CreateSequence(s.ctx(), seq, 1, before.Next-2)
	s.wantErr("lowering max below what ranges cover", err, registry.ErrInvalidSequence)
	if after := s.status(seq); after.SequenceInfo != before.SequenceInfo {
		s.t.Errorf("refused re-creations changed GLOBAL: %+v, was %+v", after.SequenceInfo, before.SequenceInfo)
	}
	info, err := s.sr.CreateSequence(s.ctx(), seq, 5_000_000, before.Next-1)
	if err != nil || info.Max != before.Next-1 {
		s.t.Errorf("lowering max to the last number handed out: %+v, %v", info, err)
	}
}

// exhaustedSaysWhat checks that a lease that cannot be had says how many
// numbers are left where.
func (s *seqSuite) exhaustedSaysWhat() {
	seq := s.create(1, 30)
	a, b := s.newHost(1), s.newHost(2)
	s.mustLease(seq, a, 25, 25)
	_, err := s.lease(seq, b, 10, 10)
	var e *registry.SequenceExhaustedError
	if !errors.As(err, &e) || !errors.Is(err, registry.ErrSequenceShort) || errors.Is(err, registry.ErrExhausted) {
		s.t.Fatalf("a lease of 10 with 5 left: %v, want a *SequenceExhaustedError matching ErrSequenceShort, not ErrExhausted", err)
	}
	if e.Sequence != seq || e.Wanted != 10 || e.DCLeft != 5 || e.GlobalLeft != 0 || e.Largest != 5 || e.Max != 30 {
		s.t.Errorf("a lease of 10 with 5 left: %+v", *e)
	}
	s.mustLease(seq, b, 5, 5)
	_, err = s.lease(seq, b, 1, 1)
	if !errors.As(err, &e) || e.DCLeft != 0 || e.GlobalLeft != 0 || !errors.Is(err, registry.ErrExhausted) || errors.Is(err, registry.ErrSequenceShort) {
		s.t.Errorf("a lease with none left: %v, want ErrExhausted", err)
	}
}
