package cassandra

import (
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/require"
)

// The data centre's partition lost right after a grant hosts leased from
// (younger than SequenceRepairAfter, so the grant could still be being
// written): the next lease leaves it alone and takes a new range, and no
// number is leased twice. Whichever way the partition is kept.
func TestSequenceLossRightAfterAGrantLeasesNothingTwice(t *testing.T) {
	for _, p := range []dcPaxos{{global: true}, {}} {
		t.Run(p.String(), func(t *testing.T) {
			ks := newTestKeyspace(t)
			reg := ks.registry(t)
			keepAt(reg, p)
			require.NoError(t, reg.SetSequenceSizing(DefaultSequenceHorizon, 40))
			_, err := reg.CreateSequence(t.Context(), "young", 1, registry.MaxSequence)
			require.NoError(t, err)
			dc, err := reg.DataCentre(t.Context())
			require.NoError(t, err)
			a, b := reg.claimForTest(t, "host_a"), reg.claimForTest(t, "host_b")
			lease := func(h registry.Holder) registry.SequenceLease {
				t.Helper()
				l, err := reg.LeaseSequence(t.Context(), registry.LeaseRequest{Sequence: "young", Name: h.Name, Owner: h.Owner, Session: h.Session,
					Size: 5, Min: 1})
				require.NoError(t, err)
				return l
			}
			la := lease(a)
			reg.seqs.wg.Wait()
			st, err := reg.SequenceStatus(t.Context(), "young")
			require.NoError(t, err)
			require.Len(t, st.Grants, 1)
			ks.Exec(t, `DELETE FROM "`+ks.Name+`".sequences WHERE seq = ? AND part = ?`, "young", cql.DCPart(dc))
			lb := lease(b)
			require.False(t, la.First <= lb.Last && lb.First <= la.Last, "host_a leased [%d, %d], host_b [%d, %d] again", la.First, la.Last, lb.First, lb.Last)
		})
	}
}

// Used-up rows store next as null: a sequence used up to its max, whose
// max is then raised (the update's condition is next = null), and a
// sequence at 2^63-1 whose data centre loses its partition (the ranges
// come back with next null). Nothing is
// leased twice, and both end in ErrExhausted.
func TestSequenceNullNextAtTheTop(t *testing.T) {
	ks := newTestKeyspace(t)
	reg := ks.registry(t)
	require.NoError(t, reg.SetSequenceSizing(time.Nanosecond, 16))
	dc, err := reg.DataCentre(t.Context())
	require.NoError(t, err)
	h := reg.claimForTest(t, "host_a")
	leased := map[uint64]bool{}
	var prev registry.SequenceLease
	useUp := func(seq string, lose int) {
		t.Helper()
		for i := 0; ; i++ {
			require.Less(t, i, 200)
			if i == lose {
				reg.seqs.wg.Wait()
				ks.Exec(t, `DELETE FROM "`+ks.Name+`".sequences WHERE seq = ? AND part = ?`, seq, cql.DCPart(dc))
				prev = registry.SequenceLease{}
			}
			l, err := reg.LeaseSequence(t.Context(), registry.LeaseRequest{Sequence: seq, Name: h.Name, Owner: h.Owner, Session: h.Session,
				PrevFirst: prev.First, PrevLast: prev.Last, Size: 5, Min: 1})
			if errors.Is(err, registry.ErrExhausted) {
				return
			}
			require.NoError(t, err)
			for n := l.First; n <= l.Last && n >= l.First; n++ {
				require.False(t, leased[n], "%d leased twice", n)
				leased[n] = true
				if n == registry.MaxSequence {
					break
				}
			}
			prev = l
		}
	}
	_, err = reg.CreateSequence(t.Context(), "raise", 1000, 1050)
	require.NoError(t, err)
	useUp("raise", -1)
	_, err = reg.CreateSequence(t.Context(), "raise", 1000, 1100)
	require.NoError(t, err, "raising the max of a used-up sequence")
	useUp("raise", -1)
	require.True(t, leased[1100] && leased[1051])

	top := registry.MaxSequence
	_, err = reg.CreateSequence(t.Context(), "top", top-99, top)
	require.NoError(t, err)
	prev = registry.SequenceLease{}
	useUp("top", 6)
}

// Two processes (Registries) of one data centre, two goroutines each,
// lease concurrently while a fifth of their conditional statements lose
// their request or their reply (granters that die between any two of
// their writes, background grants racing foreground ones): no number is
// leased twice. Whichever way the partition is kept.
func TestSequenceConcurrentGrantsWithFailures(t *testing.T) {
	for _, p := range []dcPaxos{{global: true}, {}} {
		t.Run(p.String(), func(t *testing.T) {
			ks := newTestKeyspace(t)
			var regs []*Registry
			for i := range 2 {
				reg := ks.registry(t)
				keepAt(reg, p)
				require.NoError(t, reg.SetSequenceSizing(time.Nanosecond, 20))
				if i == 0 {
					_, err := reg.CreateSequence(t.Context(), "conc", 1, registry.MaxSequence)
					require.NoError(t, err)
				}
				var mu sync.Mutex
				rng := mrand.New(mrand.NewPCG(uint64(i), 1))
				lossySeq(t, reg, func(_ int, _ []cql.SeqStmt) lossPlan {
					mu.Lock()
					defer mu.Unlock()
					switch rng.IntN(10) {
					case 0:
						return lossPlan{dropRequest: true, err: errCASTimeout}
					case 1:
						return lossPlan{loseReply: true, err: errCASTimeout}
					}
					return lossPlan{}
				})
				regs = append(regs, reg)
			}
			type result struct {
				host string
				l    registry.SequenceLease
				err  error
			}
			out := make(chan result, 400)
			var wg sync.WaitGroup
			for i, reg := range regs {
				for g := range 2 {
					h := reg.claimForTest(t, fmt.Sprintf("h%d_%d", i, g))
					wg.Add(1)
					go func() {
						defer wg.Done()
						var prev registry.SequenceLease
						for range 40 {
							l, err := reg.LeaseSequence(t.Context(), registry.LeaseRequest{Sequence: "conc", Name: h.Name, Owner: h.Owner, Session: h.Session,
								PrevFirst: prev.First, PrevLast: prev.Last, Size: 3, Min: 1})
							if err == nil {
								prev = l
							} else if errors.Is(err, registry.ErrLeaseMoved) {
								var cur registry.SequenceLease
								if cur, err = reg.HostLease(t.Context(), "conc", h.Name); err == nil {
									prev = cur
								}
							}
							out <- result{h.Name, l, err}
						}
					}()
				}
			}
			wg.Wait()
			close(out)
			owner := map[uint64]string{}
			ok, failed := 0, 0
			for r := range out {
				if r.err != nil {
					failed++
					continue
				}
				ok++
				for n := r.l.First; n <= r.l.Last; n++ {
					require.Empty(t, owner[n], "%d leased to %s and to %s", n, owner[n], r.host)
					owner[n] = r.host
				}
			}
			for _, reg := range regs {
				reg.seqs.wg.Wait()
			}
			t.Logf("%s: %d leases, %d failed calls, %d numbers, none twice", p, ok, failed, len(owner))
			require.Positive(t, ok)
		})
	}
}
