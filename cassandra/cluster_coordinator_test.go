package cassandra

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/cql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// killingQuerier runs a function in its own goroutine when the next
// conditional statement is sent (armed with arm), and counts the serial
// reads that resolve unknown outcomes.
type killingQuerier struct {
	cql.CASQuerier
	onSend atomic.Pointer[func()]
	reads  atomic.Int32
}

func (k *killingQuerier) arm(f func()) { k.onSend.Store(&f) }

func (k *killingQuerier) CAS(ctx context.Context, rec *cql.Record, stmt string, args ...any) (bool, error) {
	if f := k.onSend.Swap(nil); f != nil {
		go (*f)()
	}
	return k.CASQuerier.CAS(ctx, rec, stmt, args...)
}

func (k *killingQuerier) SerialRead(ctx context.Context, rec *cql.Record, name string) (bool, error) {
	k.reads.Add(1)
	return k.CASQuerier.SerialRead(ctx, rec, name)
}

// TestClusterCoordinatorKilledMidClaim sends a claim's lightweight
// transaction to one node and SIGKILLs that node while the statement is in
// flight. The outcome is resolved, never guessed: the serial read that
// resolves it goes through another node, and either the claim reports
// success and the row, read at SERIAL through a third session, names it
// (its owner and claim token), or the claim fails with snapid.ErrRegistry
// and the row does not name it.
//
// Rounds: the coordinator's reply is dropped (nftables) and the node
// killed after the statement ran (the claim must resolve as applied); the
// request is dropped and the node killed before it saw it (resolved as not
// applied, then sent again through another node); and the node killed at a
// random moment of the Paxos round.
func TestClusterCoordinatorKilledMidClaim(t *testing.T) {
	e := newClusterEnv(t)
	judge := e.c.Session(t)
	type round struct {
		kind  string
		cut   func(node int) // before the claim
		delay time.Duration  // from sending to the kill
	}
	rounds := []round{
		{"reply lost, node killed after the write", func(i int) { e.c.CutClients(t, i, false) }, time.Second},
		{"request lost, node killed before it", func(i int) { e.c.CutClients(t, i, true) }, 300 * time.Millisecond},
	}
	for range 3 {
		rounds = append(rounds, round{"killed at a random moment", nil, time.Duration(rand.IntN(30)) * time.Millisecond})
	}
	for r, rd := range rounds {
		x := r%e.c.N() + 1
		addr := e.c.Addr(x)
		// The claim's conditional writes go to node x first, every read
		// to the other nodes first.
		p := &coordinatorPolicy{rank: func(stmt, a string) int {
			if (a == addr) == isLWT(stmt) {
				return 0
			}
			return 1
		}}
		reg := e.registryVia(t, p, func(c *Config) { c.Timeout = 5 * time.Second })
		kq := &killingQuerier{CASQuerier: reg.q}
		reg.q = kq
		name, owner := fmt.Sprintf("mid_%d", r), "owner-"+randomHex(t, 8)
		// A first claim prepares the statement on node x, so that the
		// claim below is one request (a lost PREPARE would lose it too).
		_, err := reg.Claim(t.Context(), testClaim(name+"_warm", owner))
		require.NoError(t, err)
		kq.reads.Store(0)
		if rd.cut != nil {
			rd.cut(x)
		}
		killed := make(chan struct{})
		kq.arm(func() {
			defer close(killed)
			time.Sleep(rd.delay)
			e.c.Kill(t, x)
		})
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		h, err := reg.Claim(ctx, testClaim(name, owner))
		cancel()
		<-killed
		e.c.Heal(t)
		rec, found := e.serialRow(t, judge, name)
		t.Logf("round %d (%s, node %d killed after %s): claim %v after %s, %d serial read(s) resolving it; the row names %q",
			r, rd.kind, x, rd.delay, err, time.Since(start).Round(time.Millisecond), kq.reads.Load(), str(rec.Owner))
		if err == nil {
			require.True(t, found, "round %d: a claim reported as done has a row", r)
			assert.Equal(t, owner, str(rec.Owner), "round %d: the row names the claimer", r)
			assert.Equal(t, h.Session, str(rec.Token), "round %d: the row holds this claim's token", r)
		} else {
			require.ErrorIs(t, err, snapid.ErrRegistry, "round %d", r)
			assert.False(t, found && str(rec.Owner) == owner, "round %d: a failed claim is not in the row", r)
		}
		if rd.cut != nil {
			assert.Positive(t, kq.reads.Load(), "round %d: the lost reply was resolved by a serial read", r)
		}
		if r == 0 {
			require.NoError(t, err, "a claim that was applied resolves as applied")
		}
		reg.Close()
		require.True(t, e.c.Start(t, x))
		e.c.WaitAllUp(t)
	}
}
