package registrytest

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapid/snapid/registry"
)

// TestRegistry checks that a Registry keeps the contract registry.Registry
// documents: claims, conflicts, take-overs with floors, extensions
// conditional on the old mark and on the session, heartbeats, releases
// that never lower a mark (in unsigned order, 2^63 and above included),
// calls on names that have no row, invalid input, and concurrent claims of
// one name with exactly one winner. Every refused call must leave the row
// as it was. For a registry that implements registry.SequenceRegistry it
// also checks sequences: creation and re-creation that never lowers what
// was handed out, leases that never overlap (concurrent ones included),
// stay in [start, max] and end with ErrExhausted, leases conditional on the
// host's claim and on its previous lease, and invalid input that changes
// nothing.
//
// newRegistry is called by each subtest; it may return the same registry
// every time (each subtest uses names of its own) or a fresh one. The
// registry must be empty of the names the suite makes up ("c" followed by
// random hex digits).
func TestRegistry(t *testing.T, newRegistry func(t *testing.T) registry.Registry) {
	t.Helper()
	for _, tc := range conformanceCases {
		t.Run(tc.name, func(t *testing.T) {
			tc.run(&suite{t: t, r: newRegistry(t)})
		})
	}
	// Sequences, for a registry that keeps them.
	for _, tc := range sequenceCases {
		t.Run("Sequence"+tc.name, func(t *testing.T) {
			r := newRegistry(t)
			sr, ok := r.(registry.SequenceRegistry)
			if !ok {
				t.Skipf("%T does not implement registry.SequenceRegistry", r)
			}
			tc.run(&seqSuite{suite: &suite{t: t, r: r}, sr: sr})
		})
	}
}

var conformanceCases = []struct {
	name string
	run  func(s *suite)
}{
	{"ClaimNewName", (*suite).claimNewName},
	{"ClaimAgainSameOwner", (*suite).claimAgainSameOwner},
	{"ClaimHeldByAnotherOwner", (*suite).claimHeldByAnotherOwner},
	{"ForcedTakeoverFloor", (*suite).forcedTakeoverFloor},
	{"ClaimFloor", (*suite).claimFloor},
	{"ReleasedNameTakenOver", (*suite).releasedNameTakenOver},
	{"ProbableClone", (*suite).probableClone},
	{"ExtendConditionalOnMark", (*suite).extendConditionalOnMark},
	{"ExtendConditionalOnSession", (*suite).extendConditionalOnSession},
	{"ExtendAnotherOwner", (*suite).extendAnotherOwner},
	{"Touch", (*suite).touch},
	{"ReleaseNeverLowers", (*suite).releaseNeverLowers},
	{"UnsignedMarks", (*suite).unsignedMarks},
	{"UnknownName", (*suite).unknownName},
	{"InvalidInput", (*suite).invalidInput},
	{"CancelledContext", (*suite).cancelledContext},
	{"ConcurrentClaims", (*suite).concurrentClaims},
	{"List", (*suite).list},
}

type suite struct {
	t *testing.T
	r registry.Registry
}

func (s *suite) ctx() context.Context { return s.t.Context() }

// name returns a name of the subtest's own.
func (s *suite) name() string { return "c" + newSession()[:20] }

func owner(i int) string { return fmt.Sprintf("%032x", 0xa0+i) }

func claimOf(name, owner string) registry.Claim {
	return registry.Claim{Name: name, Owner: owner, Hostname: "host-" + owner[28:], Address: "192.0.2.1", MachineID: "machine-" + owner[28:]}
}

// claim claims name for owner and fails the test if it is refused.
func (s *suite) claim(name, owner string) registry.Holder {
	s.t.Helper()
	h, err := s.r.Claim(s.ctx(), claimOf(name, owner))
	if err != nil {
		s.t.Fatalf("Claim(%q, owner %s): %v", name, owner, err)
	}
	return h
}

// get returns the row of name, failing the test if there is none.
func (s *suite) get(name string) registry.Holder {
	s.t.Helper()
	h, err := s.r.Get(s.ctx(), name)
	if err != nil {
		s.t.Fatalf("Get(%q): %v", name, err)
	}
	return h
}

// extend moves the mark from old to new, failing the test if refused.
func (s *suite) extend(h registry.Holder, old, new uint64) {
	s.t.Helper()
	if _, err := s.r.Extend(s.ctx(), h.Name, h.Owner, h.Session, old, new); err != nil {
		s.t.Fatalf("Extend(%q, %d → %d): %v", h.Name, old, new, err)
	}
}

// same fails the test unless the row's owner, session, state and mark are
// as in want: a refused call changed nothing.
func (s *suite) same(what string, want registry.Holder) {
	s.t.Helper()
	got := s.get(want.Name)
	if got.Owner != want.Owner || got.Session != want.Session || got.State != want.State || got.Reserved != want.Reserved {
		s.t.Errorf("%s changed the row:\n got  owner %s session %s state %s mark %d\n want owner %s session %s state %s mark %d",
			what, got.Owner, got.Session, got.State, got.Reserved, want.Owner, want.Session, want.State, want.Reserved)
	}
}

func (s *suite) wantErr(what string, err, target error) {
	s.t.Helper()
	if !errors.Is(err, target) {
		s.t.Errorf("%s: got error %v, want one matching %v", what, err, target)
	}
}

func (s *suite) claimNewName() {
	name := s.name()
	h := s.claim(name, owner(1))
	if h.Name != name || h.Owner != owner(1) || h.State != registry.StateActive || h.Session == "" || h.Reserved != 0 {
		s.t.Errorf("Claim returned %+v: want the name, the owner, state active, a session and mark 0", h)
	}
	got := s.get(name)
	if got.Owner != owner(1) || got.Session != h.Session || got.State != registry.StateActive || got.Hostname != "host-"+owner(1)[28:] {
		s.t.Errorf("Get after Claim: %+v, want the claim's owner, session and host", got)
	}
}

func (s *suite) claimAgainSameOwner() {
	name := s.name()
	first := s.claim(name, owner(1))
	s.extend(first, 0, 50)
	again := s.claim(name, owner(1))
	if again.Session == first.Session || again.Session == "" {
		s.t.Errorf("a new claim by the same owner keeps session %q: every claim writes a new one", again.Session)
	}
	if again.Reserved != 50 {
		s.t.Errorf("a new claim by the same owner returned mark %d, want the row's 50", again.Reserved)
	}
	s.same("the second claim", registry.Holder{Name: name, Owner: owner(1), Session: again.Session, State: registry.StateActive, Reserved: 50})
}

func (s *suite) claimHeldByAnotherOwner() {
	name := s.name()
	h := s.claim(name, owner(1))
	s.extend(h, 0, 50)
	h.Reserved = 50
	_, err := s.r.Claim(s.ctx(), claimOf(name, owner(2)))
	s.wantErr("a claim of a name held by another owner", err, registry.ErrNameTaken)
	s.same("a refused claim", h)
}

func (s *suite) forcedTakeoverFloor() {
	for _, tc := range []struct {
		floor, want uint64
	}{{10, 50}, {100, 100}} {
		name := s.name()
		old := s.claim(name, owner(1))
		s.extend(old, 0, 50)
		c := claimOf(name, owner(2))
		c.Force, c.Floor = true, tc.floor
		h, err := s.r.Claim(s.ctx(), c)
		if err != nil {
			s.t.Fatalf("forced take-over: %v", err)
		}
		if h.Owner != owner(2) || h.Reserved != tc.want {
			s.t.Errorf("forced take-over with floor %d over mark 50: owner %s mark %d, want owner %s mark %d",
				tc.floor, h.Owner, h.Reserved, owner(2), tc.want)
		}
		s.same("the forced take-over", registry.Holder{Name: name, Owner: owner(2), Session: h.Session, State: registry.StateActive, Reserved: tc.want})
		// The old holder can no longer move or refresh the row.
		_, err = s.r.Extend(s.ctx(), name, owner(1), old.Session, tc.want, tc.want+100)
		s.wantErr("Extend by the holder taken over", err, registry.ErrNameTaken)
		s.wantErr("Touch by the holder taken over", s.r.Touch(s.ctx(), name, owner(1), old.Session), registry.ErrNameTaken)
		s.same("the old holder's refused calls", registry.Holder{Name: name, Owner: owner(2), Session: h.Session, State: registry.StateActive, Reserved: tc.want})
	}
}

// claimFloor: a claim that stands leaves the mark at least at its Floor
// (a new name, and the same owner claiming again), and never lowers it.
func (s *suite) claimFloor() {
	name := s.name()
	c := claimOf(name, owner(1))
	c.Floor = 500
	h, err := s.r.Claim(s.ctx(), c)
	if err != nil {
		s.t.Fatalf("a new name claimed with floor 500: %v", err)
	}
	if h.Reserved != 500 {
		s.t.Errorf("a new name claimed with floor 500: mark %d, want 500", h.Reserved)
	}
	if got := s.get(name).Reserved; got != 500 {
		s.t.Errorf("a new name claimed with floor 500: the row's mark is %d, want 500", got)
	}
	for _, tc := range []struct{ floor, want uint64 }{{700, 700}, {10, 700}} {
		c.Floor = tc.floor
		h, err = s.r.Claim(s.ctx(), c)
		if err != nil {
			s.t.Fatalf("the same owner claiming again with floor %d: %v", tc.floor, err)
		}
		if h.Reserved != tc.want || s.get(name).Reserved != tc.want {
			s.t.Errorf("the same owner claiming again with floor %d: mark %d (row %d), want %d", tc.floor, h.Reserved, s.get(name).Reserved, tc.want)
		}
	}
}

func (s *suite) releasedNameTakenOver() {
	name := s.name()
	old := s.claim(name, owner(1))
	s.extend(old, 0, 70)
	if err := s.r.Release(s.ctx(), name, owner(1), 80); err != nil {
		s.t.Fatalf("Release: %v", err)
	}
	if got := s.get(name); got.State != registry.StateReleased || got.Reserved != 80 {
		s.t.Errorf("after Release(80): state %s mark %d, want released and 80", got.State, got.Reserved)
	}
	h := s.claim(name, owner(2))
	if h.Owner != owner(2) || h.Reserved != 80 || h.State != registry.StateActive {
		s.t.Errorf("claim of a released name: %+v, want owner %s, mark 80 (the final value), active", h, owner(2))
	}
}

func (s *suite) probableClone() {
	name := s.name()
	h := s.claim(name, owner(1))
	clone := claimOf(name, owner(1))
	clone.Hostname, clone.MachineID = "other-host", "other-machine"
	clone.CloneWindow = time.Hour
	_, err := s.r.Claim(s.ctx(), clone)
	s.wantErr("a claim with the owner token from another machine, recently seen", err, registry.ErrProbableClone)
	s.same("a refused clone", h)
	// A clone of a virtual machine often keeps one of its identities:
	// either differing is another machine.
	for _, keep := range []string{"host name", "machine id"} {
		c := claimOf(name, owner(1))
		c.CloneWindow = time.Hour
		if keep == "host name" {
			c.MachineID = "other-machine"
		} else {
			c.Hostname = "other-host"
		}
		_, err := s.r.Claim(s.ctx(), c)
		s.wantErr("a claim with the owner token from another machine that kept the "+keep+", recently seen", err, registry.ErrProbableClone)
		s.same("a refused clone that kept the "+keep, h)
	}

	clone.CloneWindow = 0 // no clone check
	moved, err := s.r.Claim(s.ctx(), clone)
	if err != nil {
		s.t.Fatalf("a claim from another machine without a clone window: %v", err)
	}
	if moved.Session == h.Session || moved.MachineID != "other-machine" {
		s.t.Errorf("claim from another machine: %+v, want a new session and the new machine", moved)
	}
}

func (s *suite) extendConditionalOnMark() {
	name := s.name()
	h := s.claim(name, owner(1))
	s.extend(h, 0, 100)
	got, err := s.r.Extend(s.ctx(), name, owner(1), h.Session, 40, 200)
	s.wantErr("Extend from a mark that is not the row's", err, registry.ErrMarkMoved)
	if got.Reserved != 100 {
		s.t.Errorf("Extend refused with ErrMarkMoved returned mark %d, want the row's 100", got.Reserved)
	}
	h.Reserved = 100
	s.same("a refused Extend", h)
	s.extend(h, 100, 30) // a lower mark returns an unused reservation
	h.Reserved = 30
	s.same("an Extend to a lower mark", h)
}

func (s *suite) extendConditionalOnSession() {
	name := s.name()
	old := s.claim(name, owner(1))
	s.extend(old, 0, 100)
	cur := s.claim(name, owner(1)) // a later claim with the same owner: a new session
	_, err := s.r.Extend(s.ctx(), name, owner(1), old.Session, 100, 200)
	s.wantErr("Extend under a session a later claim replaced", err, registry.ErrNameTaken)
	s.wantErr("Touch under a session a later claim replaced", s.r.Touch(s.ctx(), name, owner(1), old.Session), registry.ErrNameTaken)
	s.same("calls under a replaced session", registry.Holder{Name: name, Owner: owner(1), Session: cur.Session, State: registry.StateActive, Reserved: 100})
}

func (s *suite) extendAnotherOwner() {
	name := s.name()
	h := s.claim(name, owner(1))
	_, err := s.r.Extend(s.ctx(), name, owner(2), h.Session, 0, 100)
	s.wantErr("Extend by another owner", err, registry.ErrNameTaken)
	s.same("Extend by another owner", h)
}

func (s *suite) touch() {
	name := s.name()
	h := s.claim(name, owner(1))
	before := s.get(name).LastSeen
	time.Sleep(5 * time.Millisecond) // registries store milliseconds
	if err := s.r.Touch(s.ctx(), name, owner(1), h.Session); err != nil {
		s.t.Fatalf("Touch by the holder: %v", err)
	}
	if after := s.get(name).LastSeen; !after.After(before) {
		s.t.Errorf("Touch did not move last-seen: %v, then %v", before, after)
	}
	s.wantErr("Touch by another owner", s.r.Touch(s.ctx(), name, owner(2), h.Session), registry.ErrNameTaken)
	if err := s.r.Release(s.ctx(), name, owner(1), 0); err != nil {
		s.t.Fatalf("Release: %v", err)
	}
	s.wantErr("Touch of a released name", s.r.Touch(s.ctx(), name, owner(1), h.Session), registry.ErrNameTaken)
	_, err := s.r.Extend(s.ctx(), name, owner(1), h.Session, 0, 10)
	s.wantErr("Extend of a released name", err, registry.ErrNameTaken)
	h.State = registry.StateReleased
	s.same("calls on a released name", h)
}

func (s *suite) releaseNeverLowers() {
	name := s.name()
	h := s.claim(name, owner(1))
	s.extend(h, 0, 100)
	h.Reserved = 100
	s.wantErr("Release below the mark", s.r.Release(s.ctx(), name, owner(1), 5), registry.ErrMarkMoved)
	s.same("Release below the mark", h)
	s.wantErr("Release by another owner", s.r.Release(s.ctx(), name, owner(2), 500), registry.ErrNameTaken)
	s.same("Release by another owner", h)
	if err := s.r.Release(s.ctx(), name, owner(1), 100); err != nil {
		s.t.Fatalf("Release at the mark: %v", err)
	}
	h.State = registry.StateReleased
	s.same("Release at the mark", h)
}

func (s *suite) unsignedMarks() {
	const high = uint64(math.MaxInt64) + 101 // 2^63+100
	name := s.name()
	s.claim(name, owner(1))
	c := claimOf(name, owner(2))
	c.Force, c.Floor = true, high
	h, err := s.r.Claim(s.ctx(), c)
	if err != nil {
		s.t.Fatalf("forced take-over with floor 2^63+100: %v", err)
	}
	if h.Reserved != high {
		s.t.Fatalf("forced take-over with floor 2^63+100 gave mark %d", h.Reserved)
	}
	s.wantErr("Release(5) below a mark of 2^63+100", s.r.Release(s.ctx(), name, owner(2), 5), registry.ErrMarkMoved)
	s.wantErr("Release(2^63+99) below a mark of 2^63+100", s.r.Release(s.ctx(), name, owner(2), high-1), registry.ErrMarkMoved)
	s.same("Releases below an unsigned mark", h)
	if err := s.r.Release(s.ctx(), name, owner(2), high+100); err != nil {
		s.t.Fatalf("Release(2^63+200): %v", err)
	}
	if got := s.get(name); got.Reserved != high+100 || got.State != registry.StateReleased {
		s.t.Errorf("after Release(2^63+200): mark %d state %s", got.Reserved, got.State)
	}
	next := s.claim(name, owner(3))
	if next.Reserved != high+100 {
		s.t.Errorf("the next holder starts at mark %d, want 2^63+200", next.Reserved)
	}
}

func (s *suite) unknownName() {
	name := s.name()
	_, err := s.r.Get(s.ctx(), name)
	s.wantErr("Get of a name without a row", err, registry.ErrNotRegistered)
	_, err = s.r.Extend(s.ctx(), name, owner(1), "session", 0, 100)
	s.wantErr("Extend of a name without a row", err, registry.ErrNameTaken)
	s.wantErr("Touch of a name without a row", s.r.Touch(s.ctx(), name, owner(1), "session"), registry.ErrNameTaken)
	s.wantErr("Release of a name without a row", s.r.Release(s.ctx(), name, owner(1), 100), registry.ErrNameTaken)
	_, err = s.r.Get(s.ctx(), name)
	s.wantErr("Get after refused calls on a name without a row (none may create one)", err, registry.ErrNotRegistered)
}

func (s *suite) invalidInput() {
	name := s.name()
	for _, bad := range []string{"", "Web", "1web", "web-1", strings.Repeat("a", 64)} {
		_, err := s.r.Claim(s.ctx(), claimOf(bad, owner(1)))
		s.wantErr(fmt.Sprintf("Claim of name %q", bad), err, registry.ErrInvalidName)
		_, err = s.r.Get(s.ctx(), bad)
		s.wantErr(fmt.Sprintf("Get of name %q", bad), err, registry.ErrInvalidName)
	}
	c := claimOf(name, owner(1))
	c.Owner = ""
	_, err := s.r.Claim(s.ctx(), c)
	s.wantErr("Claim with an empty owner", err, registry.ErrInvalidOption)
	c = claimOf(name, owner(1))
	c.CloneWindow = -time.Second
	_, err = s.r.Claim(s.ctx(), c)
	s.wantErr("Claim with a negative clone window", err, registry.ErrInvalidOption)
	_, err = s.r.Get(s.ctx(), name)
	s.wantErr("Get after refused claims", err, registry.ErrNotRegistered)
}

func (s *suite) cancelledContext() {
	name := s.name()
	ctx, cancel := context.WithCancel(s.ctx())
	cancel()
	_, err := s.r.Claim(ctx, claimOf(name, owner(1)))
	if err == nil {
		s.t.Fatalf("Claim with a cancelled context succeeded")
	}
	if _, err := s.r.Get(s.ctx(), name); !errors.Is(err, registry.ErrNotRegistered) {
		s.t.Errorf("a claim with a cancelled context left a row (Get: %v)", err)
	}
	h := s.claim(name, owner(1))
	if _, err := s.r.Extend(ctx, name, owner(1), h.Session, 0, 100); err == nil {
		s.t.Errorf("Extend with a cancelled context succeeded")
	}
	s.same("an Extend with a cancelled context", h)
}

func (s *suite) concurrentClaims() {
	const claimers = 8
	for round := 0; round < 3; round++ {
		name := s.name()
		errs := make([]error, claimers)
		var wg sync.WaitGroup
		for i := range claimers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i] = s.r.Claim(s.ctx(), claimOf(name, owner(i)))
			}()
		}
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil && winner >= 0:
				s.t.Errorf("round %d: claimers %d and %d both won %q", round, winner, i, name)
			case err == nil:
				winner = i
			case !errors.Is(err, registry.ErrNameTaken):
				s.t.Errorf("round %d: claimer %d: %v, want ErrNameTaken", round, i, err)
			}
		}
		if winner < 0 {
			s.t.Fatalf("round %d: nobody won %q: %v", round, name, errs)
		}
		if got := s.get(name); got.Owner != owner(winner) {
			s.t.Errorf("round %d: the row names owner %s, the winner was %s", round, got.Owner, owner(winner))
		}
	}
}

func (s *suite) list() {
	a, b := s.name(), s.name()
	s.claim(a, owner(1))
	s.claim(b, owner(2))
	rows, err := s.r.List(s.ctx())
	if err != nil {
		s.t.Fatalf("List: %v", err)
	}
	found := map[string]string{}
	for _, h := range rows {
		found[h.Name] = h.Owner
	}
	if found[a] != owner(1) || found[b] != owner(2) {
		s.t.Errorf("List lacks the rows claimed: %v", found)
	}
}
