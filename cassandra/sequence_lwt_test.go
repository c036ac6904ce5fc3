package cassandra

import (
	"context"
	"maps"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	gocql "github.com/apache/cassandra-gocql-driver/v2"
	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/require"
)

// lossySeqQuerier wraps a cql.SeqQuerier and, for chosen conditional
// statements, loses the reply after the statement ran or drops it, as a
// timeout would. Not safe for concurrent use.
type lossySeqQuerier struct {
	inner cql.SeqQuerier
	// plan is called with how many times this statement (the batch's
	// first) was sent, this send included.
	plan   func(n int, stmts []cql.SeqStmt) lossPlan
	mu     sync.Mutex // background grants call it too
	calls  map[string]int
	lost   []string // the first statement of each call whose reply was lost or dropped
	readMu sync.Mutex
	reads  map[string]map[gocql.Consistency]int // partition → consistency → reads, under readMu
}

func (l *lossySeqQuerier) CASBatch(ctx context.Context, serial gocql.Consistency, cons gocql.Consistency, stmts ...cql.SeqStmt) (bool, error) {
	l.mu.Lock()
	if l.calls == nil {
		l.calls = map[string]int{}
	}
	l.calls[stmts[0].Stmt]++
	p := l.plan(l.calls[stmts[0].Stmt], stmts)
	if p.dropRequest || p.loseReply {
		l.lost = append(l.lost, stmts[0].Stmt)
	}
	l.mu.Unlock()
	if p.dropRequest {
		return false, p.err
	}
	applied, err := l.inner.CASBatch(ctx, serial, cons, stmts...)
	if p.loseReply && err == nil {
		return false, p.err
	}
	return applied, err
}

func (l *lossySeqQuerier) ReadPartition(ctx context.Context, cons gocql.Consistency, seq, part string) ([]cql.SeqRow, error) {
	l.readMu.Lock()
	if l.reads == nil {
		l.reads = map[string]map[gocql.Consistency]int{}
	}
	if l.reads[part] == nil {
		l.reads[part] = map[gocql.Consistency]int{}
	}
	l.reads[part][cons]++
	l.readMu.Unlock()
	return l.inner.ReadPartition(ctx, cons, seq, part)
}

// readCounts returns a copy of the reads so far, by partition and
// consistency.
func (l *lossySeqQuerier) readCounts() map[string]map[gocql.Consistency]int {
	l.readMu.Lock()
	defer l.readMu.Unlock()
	reads := map[string]map[gocql.Consistency]int{}
	for part, m := range l.reads {
		reads[part] = maps.Clone(m)
	}
	return reads
}

func (l *lossySeqQuerier) ReadAllGlobal(ctx context.Context) ([]cql.SeqRow, error) {
	return l.inner.ReadAllGlobal(ctx)
}

// lossySeq installs a lossySeqQuerier on r.
func lossySeq(t *testing.T, r *Registry, plan func(n int, stmts []cql.SeqStmt) lossPlan) *lossySeqQuerier {
	t.Helper()
	q, _, err := r.seqQuerier(t.Context())
	require.NoError(t, err)
	l := &lossySeqQuerier{inner: q, plan: plan}
	r.seqs.mu.Lock()
	r.seqs.q = l
	r.seqs.mu.Unlock()
	return l
}

// Creations, grants, range insertions and leases whose replies are lost
// (applied) or whose requests are dropped (not applied) are resolved by a
// read at the right serial consistency: no lease overlaps another, no
// number is granted twice, and every call reports what happened.
func TestSequenceUnknownOutcomesResolved(t *testing.T) {
	for _, tc := range []struct {
		mode  string
		paxos dcPaxos
	}{{"lose reply", dcPaxos{}}, {"drop request", dcPaxos{global: true}}, {"overloaded", dcPaxos{}}} {
		mode := tc.mode
		t.Run(mode+" at "+tc.paxos.String(), func(t *testing.T) {
			ks := newTestKeyspace(t)
			reg := ks.registry(t)
			keepAt(reg, tc.paxos)
			require.NoError(t, reg.SetSequenceSizing(DefaultSequenceHorizon, 50))
			a := reg.claimForTest(t, "host_a")
			b := reg.claimForTest(t, "host_b")
			l := lossySeq(t, reg, func(n int, stmts []cql.SeqStmt) lossPlan {
				if n%2 == 0 {
					return lossPlan{} // every other send of a statement goes through, so that resends can win
				}
				switch mode {
				case "lose reply":
					return lossPlan{loseReply: true, err: errCASTimeout}
				case "drop request":
					if len(stmts[0].Args) > 2 && stmts[0].Args[2] == cql.KindRange && strings.HasPrefix(stmts[0].Stmt, "INSERT") {
						// A range insertion whose outcome is unknown into
						// an empty partition is sent again used up (a gap:
						// it may have been applied, leased from and lost
						// with the partition): the first range would be.
						return lossPlan{}
					}
					return lossPlan{dropRequest: true, err: errCASTimeout}
				}
				return lossPlan{loseReply: true, err: errOverloaded}
			})
			info, err := reg.CreateSequence(t.Context(), "s", 1, 1000)
			require.NoError(t, err)
			require.Equal(t, uint64(1), info.Next)
			var leases []registry.SequenceLease
			prev := map[string]registry.SequenceLease{}
			for i := range 30 {
				h := a
				if i%2 == 1 {
					h = b
				}
				p := prev[h.Name]
				got, err := reg.LeaseSequence(t.Context(), registry.LeaseRequest{Sequence: "s", Name: h.Name, Owner: h.Owner, Session: h.Session,
					PrevFirst: p.First, PrevLast: p.Last, Size: 7, Min: 1})
				require.NoError(t, err, "lease %d", i)
				prev[h.Name] = got
				leases = append(leases, got)
			}
			reg.seqs.wg.Wait() // background grants
			l.mu.Lock()
			defer l.mu.Unlock()
			kinds := map[string]bool{}
			for _, s := range l.lost {
				for _, k := range []string{"IF NOT EXISTS", "SET next = ?, lwt_token", "SET next = ? WHERE"} {
					if strings.Contains(s, k) {
						kinds[k] = true
					}
				}
			}
			require.Len(t, kinds, 3, "creations or range insertions, grants and leases all lost replies: %v", l.lost)
			// Every read that resolves an outcome (or precedes a change)
			// is at the partition's own serial consistency: SERIAL for
			// GLOBAL, the data centre's (dcPaxos) for its partition.
			dc, err := reg.DataCentre(t.Context())
			require.NoError(t, err)
			reads := l.readCounts()
			require.Len(t, reads, 2, "reads of GLOBAL and of the data centre only: %v", reads)
			for part, want := range map[string]gocql.Consistency{cql.PartGlobal: gocql.Serial, cql.DCPart(dc): reg.dcPaxos().read()} {
				require.NotZero(t, reads[part][want], "partition %s read at %v", part, want)
				require.Len(t, reads[part], 1, "partition %s read at %v only: %v", part, want, reads[part])
			}
			for i, x := range leases {
				require.True(t, x.First >= 1 && x.Last <= 1000)
				for _, y := range leases[i+1:] {
					require.False(t, x.First <= y.Last && y.First <= x.Last, "leases %v and %v overlap", x, y)
				}
			}
			st, err := reg.SequenceStatus(t.Context(), "s")
			require.NoError(t, err)
			for _, h := range st.Leases {
				require.Equal(t, prev[h.Name].First, h.First, "the registry records each host's latest lease")
			}
			require.Equal(t, len(st.Grants), len(st.Ranges))
		})
	}
}

// claimForTest claims name with a fresh owner and returns the row.
func (r *Registry) claimForTest(t *testing.T, name string) registry.Holder {
	t.Helper()
	h, err := r.Claim(t.Context(), testClaim(name, randomHex(t, 16)))
	require.NoError(t, err)
	return h
}

// The lease file restored from a backup after the host's lease moved on,
// and a whole state directory cloned onto another machine, on Cassandra:
// no number is issued twice.
func TestSequenceRestoredAndClonedOnCassandra(t *testing.T) {
	ks := newTestKeyspace(t)
	reg := ks.registry(t)
	_, err := admin.CreateSequence(t.Context(), reg, "orders", 1, registry.MaxSequence)
	require.NoError(t, err)
	dir := t.TempDir()
	path := filepath.Join(dir, "counter.u64")
	open := func(path, machine string) *snapid.Generator {
		g, err := snapid.Open(path, "shop", snapid.Config{
			Registry: &snapid.RegistryConfig{Registry: reg, CloneWindow: -1, // no clone check
				Host: snapid.HostInfo{Hostname: machine, MachineID: machine}},
			NoSync:     true,
			BindingDir: hostRecords(t, machine),
		})
		require.NoError(t, err)
		return g
	}
	seqOpts := []snapid.SequenceOption{snapid.SequenceBlock(5), snapid.SequenceLeaseSize(20)}
	g1 := open(path, "m1")
	s1, err := g1.Sequence("orders", seqOpts...)
	require.NoError(t, err)
	var issued []uint64
	next := func(s *snapid.Sequence, n int) {
		for range n {
			v, err := s.Next()
			require.NoError(t, err)
			issued = append(issued, v)
		}
	}
	next(s1, 8)
	backup := t.TempDir()
	files := []string{"counter.u64", "counter.u64.owner", "counter.u64.mark", "counter.u64.session", "counter.u64.seq.orders"}
	testfs.CopyFiles(t, dir, backup, files...)
	next(s1, 60)
	// Another process of the host, on the restored lease file.
	g2 := open(path, "m1")
	testfs.CopyFiles(t, backup, dir, "counter.u64.seq.orders")
	s2, err := g2.Sequence("orders", seqOpts...)
	require.NoError(t, err)
	next(s2, 40)
	next(s1, 40)
	require.NoError(t, s2.Close())
	require.NoError(t, g2.Close())
	// The backup as a whole state directory on another machine.
	cloneDir := t.TempDir()
	testfs.CopyFiles(t, backup, cloneDir, files...)
	g3 := open(filepath.Join(cloneDir, "counter.u64"), "m2")
	defer g3.Close()
	s3, err := g3.Sequence("orders", seqOpts...)
	require.NoError(t, err)
	defer s3.Close()
	next(s3, 40)
	for i := 0; ; i++ {
		require.Less(t, i, 100_000, "the original never stopped")
		v, err := s1.Next()
		if err != nil {
			require.ErrorIs(t, err, snapid.ErrNameTaken, "the original stops once the clone's claim superseded it")
			break
		}
		issued = append(issued, v)
	}
	seen := map[uint64]bool{}
	for _, v := range issued {
		require.False(t, seen[v], "number %d issued twice", v)
		seen[v] = true
	}
	require.NoError(t, s1.Close())
	require.NoError(t, g1.Close())
}

// The data centre hosts lease in comes from Config.LocalDC, or, without
// it, from the cluster (its only data centre), or from an injected
// function; a data centre without nodes cannot be reached.
func TestSequenceDataCentre(t *testing.T) {
	ks := newTestKeyspace(t)
	dc := ks.LocalDC(t)
	reg := ks.registry(t)
	got, err := reg.DataCentre(t.Context())
	require.NoError(t, err)
	require.Equal(t, dc, got)
	withDC := ks.registry(t, func(c *Config) { c.LocalDC = dc })
	got, err = withDC.DataCentre(t.Context())
	require.NoError(t, err)
	require.Equal(t, dc, got)
	injected := ks.registry(t)
	injected.seqs.localDC = func(context.Context) (string, error) { return "elsewhere", nil }
	_, err = injected.DataCentre(t.Context())
	require.ErrorIs(t, err, snapid.ErrRegistry, "no node of data centre elsewhere")
	require.ErrorContains(t, err, `no node in data centre "elsewhere"`)
	require.ErrorContains(t, err, "its data centres are "+dc+" (", "the error names the cluster's data centres and their nodes")
	_, err = injected.CreateSequence(t.Context(), "s", 1, 10)
	require.ErrorIs(t, err, snapid.ErrRegistry)
}

// On Cassandra too, a clean restart carries the host's lease over: the
// next number is where the lease file stood.
func TestSequenceCleanRestartOnCassandra(t *testing.T) {
	ks := newTestKeyspace(t)
	reg := ks.registry(t)
	_, err := admin.CreateSequence(t.Context(), reg, "ids", 1, registry.MaxSequence)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "counter.u64")
	open := func() (*snapid.Generator, *snapid.Sequence) {
		g, err := snapid.Open(path, "web", snapid.Config{
			Registry:   &snapid.RegistryConfig{Registry: reg},
			NoSync:     true,
			BindingDir: hostRecords(t, "host"),
		})
		require.NoError(t, err)
		s, err := g.Sequence("ids", snapid.SequenceBlock(5), snapid.SequenceLeaseSize(1000))
		require.NoError(t, err)
		return g, s
	}
	g, s := open()
	_, err = s.NextN(7)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, g.Close())
	_, _, pos, _, err := admin.ReadLeaseFile(path, "ids")
	require.NoError(t, err)
	require.Equal(t, uint64(8), pos)
	g, s = open()
	v, err := s.Next()
	require.NoError(t, err)
	require.Equal(t, pos, v, "carried over: no gap")
	require.NoError(t, s.Close())
	require.NoError(t, g.Close())
	rec, err := reg.HostLease(t.Context(), "ids", "web")
	require.NoError(t, err)
	require.Equal(t, uint64(1), rec.First, "still the first lease")
	require.NotZero(t, rec.ClosedAt)
}
