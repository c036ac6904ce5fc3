package snapid_test

import (
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// leaseGen returns the generation of the lease record at path.
func leaseGen(t *testing.T, path string) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Len(t, b, 512)
	return binary.LittleEndian.Uint64(b[272:])
}

// A lease file restored in place exactly 1, 2 or many generations behind
// (one write of the whole record each: a new lease, or the switch to the
// lease taken in advance), alone or with its floor, while the host's
// processes run; then a take by the process that moved past the copy, a
// take by a process that opened the sequence before the restore, a
// process that opens it after the restore, the Sequence closed and opened
// again, or the host's processes closed and the host started again, before
// anything else is taken. No number is handed out twice, and the restore
// is raised with an error log (or, with the floor restored too and read
// first by a process that opens the sequence afterwards, the file's
// earlier lease is dropped at open, as the registry records a later one).
//
// The process that opened the sequence before the restore opened it at
// the copy when the floor stays (only the floor tells it the file went
// back), and after the moves when the floor is restored too (only what
// it saw tells).
func TestSequenceLeaseRestoredByDepth(t *testing.T) {
	type step int
	const (
		leaseStep step = iota // each generation past the copy is a new lease (the registry's record moves)
		aheadStep             // the first is the switch to the lease the copy holds taken in advance (the registry's record stays)
	)
	type then int
	const (
		takeSame   then = iota // the process that moved past the copy takes
		takeBefore             // the process that opened the sequence before the restore takes
		takeFresh              // a process that joins the host's claim opens the sequence and takes
		reopen                 // the process that opened before closes its Sequence, opens it again and takes
		restart                // the process that moved closed before the restore; the other closes; the host starts again and takes
		restartAll             // the process that moved closes, then the other; the host starts again and takes
	)
	thenNames := map[then]string{takeSame: "take by the process that moved", takeBefore: "take by a process opened before",
		takeFresh: "a process opened after", reopen: "Sequence closed and opened again", restart: "the other process closes, restart",
		restartAll: "both close, restart"}
	type tcase struct {
		name   string
		depth  uint64 // generations the copy is behind
		floors bool   // the floor restored too
		step   step
		then   then
	}
	var cases []tcase
	for _, depth := range []uint64{1, 2, 5} {
		for _, floors := range []bool{false, true} {
			for _, st := range []step{leaseStep, aheadStep} {
				for _, th := range []then{takeSame, takeBefore, takeFresh, reopen, restart, restartAll} {
					if floors && th == takeFresh && st == aheadStep && depth == 1 {
						// Not covered (seqlease.go): the copy's latest
						// lease is the one the registry records (the copy
						// took it in advance), and nothing the new process
						// can read tells that the copy's current one was
						// used up since.
						continue
					}
					what := "alone"
					if floors {
						what = "with its floor"
					}
					kind := "leases"
					if st == aheadStep {
						kind = "switch to the lease taken in advance"
					}
					cases = append(cases, tcase{fmt.Sprintf("%d back, %s, %s, %s", depth, what, kind, thenNames[th]), depth, floors, st, th})
				}
			}
		}
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reg := registrytest.NewRegistry()
			createSeq(t, reg, "orders", 1, registry.MaxSequence)
			h := newSeqHost(t, "web_1")
			lease := h.path + ".seq.orders"
			floor := lease + ".floor"
			var logs syncBuffer
			logOpt := WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))
			seqOpts := []SequenceOption{SequenceBlock(1), SequenceLeaseSize(10)}
			var issued []uint64

			g1 := h.open(t, reg, logOpt) // the process that moves past the copy
			s1 := openSeq(t, g1, "orders", seqOpts...)
			g2 := h.open(t, reg, logOpt) // the process that opens the sequence before the restore
			var s2 *Sequence
			open2 := func() { s2 = openSeq(t, g2, "orders", seqOpts...) }

			takeEach(t, s1, 3, &issued)
			if tc.step == aheadStep {
				// Blocks taken until the next lease is taken in advance.
				for i := 0; ; i++ {
					require.Less(t, i, 1000, "no lease taken in advance")
					_, ahead, _, _, err := ReadLeaseFile(h.path, "orders")
					require.NoError(t, err)
					if ahead.First != 0 {
						break
					}
					issued = append(issued, drawSeq(t, s1, 1)...)
					g1.ExportWaitSequences()
				}
			}
			if !tc.floors {
				open2() // at the copy: it sees no later generation
			}
			backupLease, err := os.ReadFile(lease)
			require.NoError(t, err)
			backupFloor, err := os.ReadFile(floor)
			require.NoError(t, err)
			copyGen := leaseGen(t, lease)
			copyCur, copyAhead, _, _, err := ReadLeaseFile(h.path, "orders")
			require.NoError(t, err)

			// The process moves tc.depth generations past the copy.
			for i := 0; leaseGen(t, lease) < copyGen+tc.depth; i++ {
				require.Less(t, i, 100_000, "the lease file's generation does not move")
				takeEach(t, s1, 1, &issued)
			}
			require.Equal(t, copyGen+tc.depth, leaseGen(t, lease), "exactly %d generations past the copy", tc.depth)
			if tc.step == aheadStep {
				later, _, _, _, err := ReadLeaseFile(h.path, "orders")
				require.NoError(t, err)
				require.NotEqual(t, copyCur.First, later.First, "the lease taken in advance is current")
				if tc.depth == 1 {
					require.Equal(t, copyAhead.First, later.First, "the copy's lease taken in advance is current")
				}
			}
			takeEach(t, s1, 1, &issued) // a number of the later generation
			if tc.floors {
				open2() // after the moves: it saw the later generation
			}
			if tc.then == restart {
				require.NoError(t, s1.Close())
				require.NoError(t, g1.Close())
			}

			logged := len(logs.String())
			if tc.floors {
				writeInPlace(t, floor, backupFloor)
			}
			writeInPlace(t, lease, backupLease)
			require.Equal(t, copyGen, leaseGen(t, lease), "restored")

			closeProc := func(g *Generator, s *Sequence) {
				require.NoError(t, s.Close())
				require.NoError(t, g.Close())
			}
			restartHost := func() {
				g := h.open(t, reg, logOpt) // the host's next start: a new claim
				defer g.Close()
				s := openSeq(t, g, "orders", seqOpts...)
				defer s.Close()
				takeEach(t, s, 15, &issued)
			}
			open1, open2nd := tc.then != restart, true
			switch tc.then {
			case takeSame:
				takeEach(t, s1, 15, &issued)
			case takeBefore:
				takeEach(t, s2, 15, &issued)
			case takeFresh:
				g3 := h.open(t, reg, logOpt)
				defer g3.Close()
				s3 := openSeq(t, g3, "orders", seqOpts...)
				defer s3.Close()
				takeEach(t, s3, 15, &issued)
			case reopen:
				require.NoError(t, s2.Close())
				open2()
				takeEach(t, s2, 15, &issued)
			case restart:
				closeProc(g2, s2)
				open2nd = false
				restartHost()
			case restartAll:
				closeProc(g1, s1)
				closeProc(g2, s2)
				open1, open2nd = false, false
				restartHost()
			}
			// The processes still running go on.
			if open1 {
				takeEach(t, s1, 15, &issued)
				issued = append(issued, drawSeq(t, s1, 15)...)
				closeProc(g1, s1)
			}
			if open2nd {
				takeEach(t, s2, 15, &issued)
				closeProc(g2, s2)
			}
			requireUnique(t, issued, 1, registry.MaxSequence)

			after := logs.String()[logged:]
			if tc.floors && tc.then == takeFresh {
				require.Contains(t, after, "its ranges are dropped (a gap)", "the earlier lease dropped at open:\n%s", after)
			} else {
				require.True(t, strings.Contains(after, "level=ERROR") && strings.Contains(after, "went back"),
					"the restore raised with an error log:\n%s", after)
			}
		})
	}
}
