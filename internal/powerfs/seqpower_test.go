package powerfs_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/rpc"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/powerfs"
	"github.com/snapid/snapid/registry"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// The sequence power-cut test runs children of its own role ("seqdraw"):
// each opens a Generator on the mounted powerfs with the parent's
// in-memory registry (registrytest, which keeps sequences) over net/rpc, as
// the counter's children do, opens a Sequence and draws numbers with Next
// until killed, reporting each one only after Next returned.
const (
	roleSeqDraw = "seqdraw"
	envSeq      = "POWERFS_TEST_SEQ"       // sequence name
	envSeqLease = "POWERFS_TEST_SEQ_LEASE" // SequenceLeaseSize
)

func init() {
	// Before TestMain, which runs the counter's children for any role.
	if os.Getenv(envRole) == roleSeqDraw {
		os.Exit(seqChild())
	}
}

// seqChild opens the Generator and the Sequence, then calls Next in
// goroutines until killed, an error, or a minute.
func seqChild() int {
	atoi := func(k string) int {
		n, _ := strconv.Atoi(os.Getenv(k))
		return n
	}
	say("START")
	reg, err := dialSeqRegistry(os.Getenv(envSock))
	if err != nil {
		say("E registry: %v", err)
		return 3
	}
	defer reg.Close()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	g, err := snapid.Open(os.Getenv(envPath), os.Getenv(envName), snapid.Config{
		Registry:   registryConfig(reg, uint64(atoi(envStep))),
		NoSync:     os.Getenv(envSync) == "false",
		Logger:     quiet,
		BindingDir: os.Getenv(envRecords),
	})
	if err != nil {
		say("E open: %v", err)
		return 3
	}
	defer g.Close()
	s, err := g.Sequence(os.Getenv(envSeq), snapid.SequenceBlock(uint64(max(1, atoi(envBlock)))),
		snapid.SequenceLeaseSize(uint64(max(1, atoi(envSeqLease)))))
	if err != nil {
		say("E sequence: %v", err)
		return 3
	}
	defer s.Close()
	// SIGTERM stops the drawing and closes cleanly: the host's last
	// process records where its lease file stands, for the next claim to
	// carry the lease over.
	var stop atomic.Bool
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	go func() { <-term; stop.Store(true) }()
	say("READY")
	deadline := time.Now().Add(time.Minute)
	var wg sync.WaitGroup
	for range max(1, atoi(envGoroutines)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) && !stop.Load() {
				n, err := s.Next()
				if err != nil {
					say("E next: %v", err)
					return
				}
				say("N %d", n)
			}
		}()
	}
	wg.Wait()
	if err := s.Close(); err != nil {
		say("E close: %v", err)
	}
	if err := g.Close(); err != nil {
		say("E close: %v", err)
	}
	return 0
}

// seqChildConfig is what a sequence child does.
type seqChildConfig struct {
	childConfig
	seq   string
	lease int
}

func startSeqChild(t *testing.T, c seqChildConfig) *proc {
	t.Helper()
	self, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(),
		envRole+"="+roleSeqDraw, envPath+"="+c.path, envName+"="+c.name,
		envBlock+"="+strconv.Itoa(c.block), envSync+"="+strconv.FormatBool(c.sync),
		envSock+"="+c.sock, envStep+"="+strconv.Itoa(c.step),
		envGoroutines+"="+strconv.Itoa(c.goroutines),
		envSeq+"="+c.seq, envSeqLease+"="+strconv.Itoa(c.lease), envRecords+"="+c.records)
	p := &proc{cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = &p.stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	go p.read(out)
	return p
}

// TestPowerCutSequence: processes of one host (3, with 1 to 3 goroutines
// each) draw numbers of a sequence from the host's lease file on a
// powerfs, with small blocks and leases so that blocks, leases and
// prefetches all happen between cuts; the power is cut at a random moment,
// the file system keeps only what was synced (or, with KeepSome, some of
// what was not), and new processes start. Across every cut no number is
// returned twice, and the lease file after a cut is never corrupt. With
// clean, every other round the processes close cleanly before the cut (the
// host's last one records where its lease stands, and the next claim may
// carry the lease over if the file is exactly as recorded).
func TestPowerCutSequence(t *testing.T) {
	f := mount(t)
	rounds := 30
	if testing.Short() {
		rounds = 10
	}
	for mi, mode := range []struct {
		name   string
		cut    powerfs.CutMode
		clean  bool
		noSync bool
	}{{"keep-some", powerfs.KeepSome, false, false}, {"forget-all", powerfs.ForgetAll, false, false},
		{"clean-close/keep-some", powerfs.KeepSome, true, false},
		{"clean-close/forget-all", powerfs.ForgetAll, true, false},
		// With sync off the position recorded at close is ahead of the
		// file after the cut: the lease must be dropped, not carried over.
		{"nosync/clean-close/forget-all", powerfs.ForgetAll, true, true}} {
		t.Run(mode.name, func(t *testing.T) {
			rng := newRNG(t)
			dir := filepath.Join(f.Dir(), fmt.Sprintf("s%d", mi))
			require.NoError(t, os.Mkdir(dir, 0o755))
			syncDir(t, f.Dir())
			reg, sock := seqRegistryFor(t)
			_, err := admin.CreateSequence(context.Background(), reg, "orders", 1, registry.MaxSequence)
			require.NoError(t, err)
			path := filepath.Join(dir, "counter.u64")
			name := fmt.Sprintf("seqpower%d", mi)
			cfg := seqChildConfig{childConfig: childConfig{path: path, name: name, block: 3, sync: !mode.noSync, sock: sock, step: 200},
				seq: "orders", lease: 40}
			h := newHistory(t)
			asClosed := 0 // clean rounds whose lease file after the cut is as recorded at close
			for round := range rounds {
				procs := make([]*proc, 3)
				records := bootPlace(t) // the children of a round are one host
				for i := range procs {
					c := cfg
					c.goroutines = 1 + i
					c.records = records
					procs[i] = startSeqChild(t, c)
				}
				for start := time.Now(); time.Since(start) < 2*time.Second; time.Sleep(time.Millisecond) {
					if _, _, n := procs[0].state(); n > 0 {
						break
					}
				}
				time.Sleep(time.Duration(rng.Int64N(int64(30*time.Millisecond) + 1)))
				if mode.clean && round%2 == 1 {
					for _, p := range procs {
						p.cmd.Process.Signal(syscall.SIGTERM)
					}
					for _, p := range procs {
						<-p.done
					}
				}
				require.NoError(t, f.PowerCut(mode.cut, rng, func() {
					for _, p := range procs {
						p.kill()
					}
				}))
				require.Empty(t, childErrors(procs), "round %d", round)
				for _, p := range procs {
					h.add(round, p.nums)
				}
				_, _, pos, ok, err := admin.ReadLeaseFile(path, "orders")
				if err != nil && !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("round %d: after the cut: %v", round, err)
				}
				if rec, err := reg.HostLease(context.Background(), "orders", name); err == nil && ok && rec.ClosedAt != 0 && rec.ClosedAt == pos {
					asClosed++
				}
			}
			// After the last cut, a process of the host goes on with
			// numbers never returned.
			g := openParent(t, path, name, nil, snapid.Config{Registry: registryConfig(reg, 200)})
			s, err := g.Sequence("orders", snapid.SequenceBlock(3), snapid.SequenceLeaseSize(40))
			require.NoError(t, err)
			for range 100 {
				n, err := s.Next()
				require.NoError(t, err)
				_, dup := h.seen[n]
				require.False(t, dup, "%d returned again after the last cut", n)
			}
			require.NoError(t, s.Close())
			require.NoError(t, g.Close())
			t.Logf("%s: %d power cuts, %d sequence numbers returned and checked unique across them, highest %d; %d lease files as recorded at close",
				mode.name, rounds, len(h.seen), h.max, asClosed)
			if mode.clean && !mode.noSync {
				require.NotZero(t, asClosed, "some leases could be carried over a cut after a clean close")
			}
			require.Greater(t, len(h.seen), rounds, "the children drew numbers before the cuts")
		})
	}
}

// seqRegistryFor serves a fresh in-memory registry, with its sequences,
// for the children of t.
func seqRegistryFor(t *testing.T) (*registrytest.Registry, string) {
	t.Helper()
	reg := registrytest.NewRegistry()
	dir, err := os.MkdirTemp("", "powerfs-seq")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "reg.sock")
	srv := rpc.NewServer()
	require.NoError(t, srv.RegisterName("Registry", &RegistryService{reg: reg}))
	require.NoError(t, srv.RegisterName("SeqRegistry", &SeqRegistryService{reg: reg}))
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	t.Cleanup(func() { l.Close() })
	go srv.Accept(l)
	return reg, sock
}

// The sentinel errors of the sequence calls, besides the registry's.
var seqSentinels = []struct {
	name string
	err  error
}{
	{"exhausted", snapid.ErrExhausted},
	{"sequence-short", snapid.ErrSequenceShort},
	{"no-sequence", snapid.ErrNoSequence},
	{"invalid-sequence", registry.ErrInvalidSequence},
	{"lease-moved", registry.ErrLeaseMoved},
}

// SeqReply is the answer to every sequence call.
type SeqReply struct {
	Lease  registry.SequenceLease
	Status []registry.SequenceStatus
	Reply
}

func (r *SeqReply) setErr(err error) {
	r.Reply.setErr(err)
	if err == nil {
		return
	}
	for _, s := range seqSentinels {
		if errors.Is(err, s.err) {
			r.Kinds = append(r.Kinds, s.name)
		}
	}
}

func (r *SeqReply) err() error {
	err := r.Reply.err()
	if err == nil {
		return nil
	}
	for _, k := range r.Kinds {
		for _, s := range seqSentinels {
			if s.name == k {
				err = fmt.Errorf("%w: %w", s.err, err)
			}
		}
	}
	return err
}

// CloseLeaseArgs are CloseLease's arguments; NameArgs HostLease's.
type CloseLeaseArgs struct {
	Lease registry.SequenceLease
	Pos   uint64
}

type NameArgs struct{ Sequence, Name string }

// SeqRegistryService serves a registry's sequences to the children.
type SeqRegistryService struct{ reg registry.SequenceRegistry }

func (s *SeqRegistryService) LeaseSequence(req registry.LeaseRequest, r *SeqReply) error {
	l, err := s.reg.LeaseSequence(context.Background(), req)
	r.Lease = l
	r.setErr(err)
	return nil
}

func (s *SeqRegistryService) CloseLease(a CloseLeaseArgs, r *SeqReply) error {
	r.setErr(s.reg.CloseLease(context.Background(), a.Lease, a.Pos))
	return nil
}

func (s *SeqRegistryService) AdoptLease(a registry.LeaseAdoption, r *SeqReply) error {
	l, err := s.reg.AdoptLease(context.Background(), a)
	r.Lease = l
	r.setErr(err)
	return nil
}

func (s *SeqRegistryService) HostLease(a NameArgs, r *SeqReply) error {
	l, err := s.reg.HostLease(context.Background(), a.Sequence, a.Name)
	r.Lease = l
	r.setErr(err)
	return nil
}

func (s *SeqRegistryService) SequenceStatus(name string, r *SeqReply) error {
	st, err := s.reg.SequenceStatus(context.Background(), name)
	r.Status = []registry.SequenceStatus{st}
	r.setErr(err)
	return nil
}

func (s *SeqRegistryService) ListSequences(_ int, r *SeqReply) error {
	st, err := s.reg.ListSequences(context.Background())
	r.Status = st
	r.setErr(err)
	return nil
}

// rpcSeqRegistry is a registry.Registry and registry.SequenceRegistry that
// calls the parent's.
type rpcSeqRegistry struct{ *rpcRegistry }

func dialSeqRegistry(sock string) (*rpcSeqRegistry, error) {
	r, err := dialRegistry(sock)
	if err != nil {
		return nil, err
	}
	return &rpcSeqRegistry{r}, nil
}

func (r *rpcSeqRegistry) seqCall(ctx context.Context, method string, args any) (*SeqReply, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", snapid.ErrRegistry, err) // nothing sent
	}
	var rep SeqReply
	call := r.c.Go("SeqRegistry."+method, args, &rep, make(chan *rpc.Call, 1))
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", snapid.ErrRegistry, ctx.Err())
	case <-call.Done:
	}
	if call.Error != nil {
		return nil, fmt.Errorf("%w: %w", snapid.ErrRegistry, call.Error)
	}
	return &rep, rep.err()
}

func (r *rpcSeqRegistry) CreateSequence(ctx context.Context, name string, start, max uint64) (registry.SequenceInfo, error) {
	return registry.SequenceInfo{}, fmt.Errorf("%w: the children do not create sequences", registry.ErrInvalidSequence)
}

func (r *rpcSeqRegistry) LeaseSequence(ctx context.Context, req registry.LeaseRequest) (registry.SequenceLease, error) {
	rep, err := r.seqCall(ctx, "LeaseSequence", req)
	if rep == nil {
		return registry.SequenceLease{}, err
	}
	return rep.Lease, err
}

func (r *rpcSeqRegistry) CloseLease(ctx context.Context, l registry.SequenceLease, pos uint64) error {
	_, err := r.seqCall(ctx, "CloseLease", CloseLeaseArgs{Lease: l, Pos: pos})
	return err
}

func (r *rpcSeqRegistry) AdoptLease(ctx context.Context, a registry.LeaseAdoption) (registry.SequenceLease, error) {
	rep, err := r.seqCall(ctx, "AdoptLease", a)
	if rep == nil {
		return registry.SequenceLease{}, err
	}
	return rep.Lease, err
}

func (r *rpcSeqRegistry) HostLease(ctx context.Context, sequence, name string) (registry.SequenceLease, error) {
	rep, err := r.seqCall(ctx, "HostLease", NameArgs{Sequence: sequence, Name: name})
	if rep == nil {
		return registry.SequenceLease{}, err
	}
	return rep.Lease, err
}

func (r *rpcSeqRegistry) SequenceStatus(ctx context.Context, name string) (registry.SequenceStatus, error) {
	rep, err := r.seqCall(ctx, "SequenceStatus", name)
	if rep == nil || len(rep.Status) == 0 {
		return registry.SequenceStatus{}, err
	}
	return rep.Status[0], err
}

func (r *rpcSeqRegistry) ListSequences(ctx context.Context) ([]registry.SequenceStatus, error) {
	rep, err := r.seqCall(ctx, "ListSequences", 0)
	if rep == nil {
		return nil, err
	}
	return rep.Status, err
}

var _ registry.SequenceRegistry = (*rpcSeqRegistry)(nil)
