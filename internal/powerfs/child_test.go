package powerfs_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/rpc"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/registry"
)

// The power-cut tests re-run this test binary as children (TestMain sees
// envRole) that open a Generator on the mounted powerfs and draw ids until
// they are killed, reporting each id on stdout only after Next returned.
// With a registry, the children reach the parent's in-memory registry
// (registrytest) over net/rpc on a Unix socket: the registry is not on the
// disk that loses power, so it lives in the parent and survives every cut.
const (
	envRole       = "POWERFS_TEST_ROLE" // "draw"
	envPath       = "POWERFS_TEST_PATH"
	envName       = "POWERFS_TEST_NAME"
	envBlock      = "POWERFS_TEST_BLOCK" // block size, 0: strict
	envSync       = "POWERFS_TEST_SYNC"  // "true" or "false"
	envSock       = "POWERFS_TEST_SOCK"  // registry socket, "": no registry
	envStep       = "POWERFS_TEST_STEP"  // RegistryConfig.ReserveStep
	envInit       = "POWERFS_TEST_INIT"  // > 0: Init(path, this) first
	envGoroutines = "POWERFS_TEST_GOROUTINES"
	envForm       = "POWERFS_TEST_FORM"    // "decimal" or "striped" (stride 1024): node number 7; else the name form
	envRecords    = "POWERFS_TEST_RECORDS" // the simulated host's place of records (Config.BindingDir)
)

func TestMain(m *testing.M) {
	if os.Getenv(envRole) != "" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

// stripedStride is the stride of the striped children.
const stripedStride = 1024

// hostInfo is the machine every child and the parent claim as.
var hostInfo = snapid.HostInfo{Hostname: "powerfs-host", Address: "10.0.0.1", MachineID: "powerfs-machine"}

// say writes one line in one write, so that a killed child never leaves
// half a line.
func say(format string, args ...any) {
	os.Stdout.Write(fmt.Appendf(nil, format+"\n", args...))
}

// child runs a child: Init (if asked), Open, then Next in goroutines until
// killed, an error, or a minute.
func child() int {
	atoi := func(k string) int {
		n, _ := strconv.Atoi(os.Getenv(k))
		return n
	}
	say("START")
	path, name := os.Getenv(envPath), os.Getenv(envName)
	syncOn := os.Getenv(envSync) != "false"
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	records := os.Getenv(envRecords)
	cfg := snapid.Config{NoSync: !syncOn, Logger: quiet, BindingDir: records}
	if b := atoi(envBlock); b > 0 {
		cfg.Block = &snapid.Block{Size: uint64(b)}
	}
	striped := false
	switch os.Getenv(envForm) {
	case "decimal":
		cfg.Form = snapid.Decimal{NodeNumber: 7}
	case "striped":
		cfg.Form = snapid.Striped{NodeNumber: 7, Stride: stripedStride}
		striped = true
	}
	if sock := os.Getenv(envSock); sock != "" {
		reg, err := dialRegistry(sock)
		if err != nil {
			say("E registry: %v", err)
			return 3
		}
		defer reg.Close()
		cfg.Registry = registryConfig(reg, uint64(atoi(envStep)))
	}
	if n := atoi(envInit); n > 0 {
		if _, err := admin.Init(path, uint64(n), admin.WithBindingDir(records)); err != nil { // admin always syncs
			say("E init: %v", err)
			return 3
		}
		say("INIT")
	}
	g, err := snapid.Open(path, name, cfg)
	if err != nil {
		say("E open: %v", err)
		return 3
	}
	say("READY")
	deadline := time.Now().Add(time.Minute)
	var wg sync.WaitGroup
	for range max(1, atoi(envGoroutines)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				var n uint64
				var err error
				if striped {
					n, err = g.UniqueUint64() // the id itself: number × stride + 7
				} else {
					n, err = g.Next()
				}
				if err != nil {
					say("E next: %v", err)
					return
				}
				say("N %d", n)
			}
		}()
	}
	wg.Wait()
	g.Close()
	return 0
}

// registryConfig is the registry settings of every Generator on the
// registry in these tests: small steps, so that extensions happen within a
// round, and no sizing of steps by the outage horizon.
func registryConfig(reg registry.Registry, step uint64) *snapid.RegistryConfig {
	if step == 0 {
		step = 1000
	}
	return &snapid.RegistryConfig{Registry: reg, Host: hostInfo,
		ReserveStep: step, OutageHorizon: -1, Timeout: 10 * time.Second}
}

// childConfig is what a child does.
type childConfig struct {
	path, name string
	block      int
	sync       bool
	sock       string
	step       int
	init       int
	goroutines int
	form       string // "decimal": numbers ending in 0 are never handed out; "striped": the child reports ids, not numbers
	// records is the simulated host's place of records of names (see
	// bootPlace); cutRound gives each round's children one.
	records string
}

// bootPlace returns a new place of records of names for one boot of a
// simulated host: a directory of the test's own, never the machine's. A
// power cut rebuilds powerfs's files (a counter comes back with another
// inode number, which a real file system keeps), and the host's record of
// a name would refuse the counter as replaced: so every boot after a cut
// is a host with a place of its own, and the programs of one boot share
// it, as the programs of a host do.
func bootPlace(t *testing.T) string {
	t.Helper()
	return filepath.Join(t.TempDir(), "records")
}

// proc is a running child and what it reported.
type proc struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	done   chan struct{} // stdout at EOF

	mu      sync.Mutex
	nums    []uint64
	errs    []string
	inited  bool
	ready   bool
	started bool
}

func startChild(t *testing.T, c childConfig) *proc {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^$")
	cmd.Env = append(os.Environ(),
		envRole+"=draw", envPath+"="+c.path, envName+"="+c.name,
		envBlock+"="+strconv.Itoa(c.block), envSync+"="+strconv.FormatBool(c.sync),
		envSock+"="+c.sock, envStep+"="+strconv.Itoa(c.step), envInit+"="+strconv.Itoa(c.init),
		envGoroutines+"="+strconv.Itoa(c.goroutines), envForm+"="+c.form, envRecords+"="+c.records)
	p := &proc{cmd: cmd, done: make(chan struct{})}
	cmd.Stderr = &p.stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go p.read(out)
	return p
}

func (p *proc) read(out io.Reader) {
	defer close(p.done)
	r := bufio.NewReader(out)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return // a partial line was cut by the kill: never counted
		}
		line = strings.TrimSuffix(line, "\n")
		p.mu.Lock()
		switch {
		case line == "START":
			p.started = true
		case line == "READY":
			p.ready = true
		case line == "INIT":
			p.inited = true
		case strings.HasPrefix(line, "N "):
			n, err := strconv.ParseUint(line[2:], 10, 64)
			if err != nil {
				p.errs = append(p.errs, "bad line "+line)
			} else {
				p.nums = append(p.nums, n)
			}
		default:
			p.errs = append(p.errs, line)
		}
		p.mu.Unlock()
	}
}

// state returns what the child reported so far.
func (p *proc) state() (ready, inited bool, n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ready, p.inited, len(p.nums)
}

// waitStarted waits until the child is running (or a few seconds).
func (p *proc) waitStarted() {
	for start := time.Now(); time.Since(start) < 5*time.Second; time.Sleep(100 * time.Microsecond) {
		p.mu.Lock()
		ok := p.started
		p.mu.Unlock()
		if ok {
			return
		}
	}
}

// kill kills the child (SIGKILL) and waits until it is gone and its output
// read.
func (p *proc) kill() {
	p.cmd.Process.Kill()
	<-p.done
	p.cmd.Wait()
}

// The registry over net/rpc: the parent serves a registry.Registry, the
// children call it through rpcRegistry. Errors travel as their message and
// the names of the package's sentinel errors they match, so that the
// library's errors.Is checks see them as the registry returned them.

var sentinels = []struct {
	name string
	err  error
}{
	{"name-taken", snapid.ErrNameTaken},
	{"probable-clone", snapid.ErrProbableClone},
	{"mark-moved", registry.ErrMarkMoved},
	{"not-registered", registry.ErrNotRegistered},
	{"invalid-option", snapid.ErrInvalidOption},
	{"invalid-name", snapid.ErrInvalidName},
	{"registry", snapid.ErrRegistry},
}

// Reply is the answer to every call.
type Reply struct {
	Holder  registry.Holder
	Holders []registry.Holder
	Kinds   []string
	Msg     string
}

func (r *Reply) setErr(err error) {
	if err == nil {
		return
	}
	r.Msg = err.Error()
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			r.Kinds = append(r.Kinds, s.name)
		}
	}
}

func (r *Reply) err() error {
	if r.Msg == "" {
		return nil
	}
	args := []any{}
	format := ""
	for _, k := range r.Kinds {
		for _, s := range sentinels {
			if s.name == k {
				format += "%w: "
				args = append(args, s.err)
			}
		}
	}
	return fmt.Errorf(format+"%s", append(args, r.Msg)...)
}

// ExtendArgs are the arguments of Extend, Touch and Release.
type ExtendArgs struct {
	Name, Owner, Session string
	Old, New             uint64
}

// RegistryService serves a registry to the children.
type RegistryService struct{ reg registry.Registry }

func (s *RegistryService) Claim(c registry.Claim, r *Reply) error {
	h, err := s.reg.Claim(context.Background(), c)
	r.Holder = h
	r.setErr(err)
	return nil
}

func (s *RegistryService) Extend(a ExtendArgs, r *Reply) error {
	h, err := s.reg.Extend(context.Background(), a.Name, a.Owner, a.Session, a.Old, a.New)
	r.Holder = h
	r.setErr(err)
	return nil
}

func (s *RegistryService) Touch(a ExtendArgs, r *Reply) error {
	r.setErr(s.reg.Touch(context.Background(), a.Name, a.Owner, a.Session))
	return nil
}

func (s *RegistryService) Release(a ExtendArgs, r *Reply) error {
	r.setErr(s.reg.Release(context.Background(), a.Name, a.Owner, a.New))
	return nil
}

func (s *RegistryService) Get(name string, r *Reply) error {
	h, err := s.reg.Get(context.Background(), name)
	r.Holder = h
	r.setErr(err)
	return nil
}

func (s *RegistryService) List(_ int, r *Reply) error {
	hs, err := s.reg.List(context.Background())
	r.Holders = hs
	r.setErr(err)
	return nil
}

// serveRegistry serves reg on a Unix socket at sock until the test ends.
func serveRegistry(t *testing.T, reg registry.Registry, sock string) {
	t.Helper()
	srv := rpc.NewServer()
	if err := srv.RegisterName("Registry", &RegistryService{reg: reg}); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go srv.Accept(l)
}

// rpcRegistry is a registry.Registry that calls the parent's.
type rpcRegistry struct{ c *rpc.Client }

func dialRegistry(sock string) (*rpcRegistry, error) {
	c, err := rpc.Dial("unix", sock)
	if err != nil {
		return nil, err
	}
	return &rpcRegistry{c: c}, nil
}

func (r *rpcRegistry) Close() error { return r.c.Close() }

func (r *rpcRegistry) call(ctx context.Context, method string, args any) (*Reply, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", snapid.ErrRegistry, err) // nothing sent
	}
	var rep Reply
	call := r.c.Go("Registry."+method, args, &rep, make(chan *rpc.Call, 1))
	select {
	case <-ctx.Done():
		// Like a lost reply: the call may still be applied.
		return nil, fmt.Errorf("%w: %w", snapid.ErrRegistry, ctx.Err())
	case <-call.Done:
	}
	if call.Error != nil {
		return nil, fmt.Errorf("%w: %w", snapid.ErrRegistry, call.Error)
	}
	return &rep, rep.err()
}

func (r *rpcRegistry) Claim(ctx context.Context, c registry.Claim) (registry.Holder, error) {
	rep, err := r.call(ctx, "Claim", c)
	if rep == nil {
		return registry.Holder{}, err
	}
	return rep.Holder, err
}

func (r *rpcRegistry) Extend(ctx context.Context, name, owner, session string, old, new uint64) (registry.Holder, error) {
	rep, err := r.call(ctx, "Extend", ExtendArgs{Name: name, Owner: owner, Session: session, Old: old, New: new})
	if rep == nil {
		return registry.Holder{}, err
	}
	return rep.Holder, err
}

func (r *rpcRegistry) Touch(ctx context.Context, name, owner, session string) error {
	_, err := r.call(ctx, "Touch", ExtendArgs{Name: name, Owner: owner, Session: session})
	return err
}

func (r *rpcRegistry) Release(ctx context.Context, name, owner string, final uint64) error {
	_, err := r.call(ctx, "Release", ExtendArgs{Name: name, Owner: owner, New: final})
	return err
}

func (r *rpcRegistry) Get(ctx context.Context, name string) (registry.Holder, error) {
	rep, err := r.call(ctx, "Get", name)
	if rep == nil {
		return registry.Holder{}, err
	}
	return rep.Holder, err
}

func (r *rpcRegistry) List(ctx context.Context) ([]registry.Holder, error) {
	rep, err := r.call(ctx, "List", 0)
	if rep == nil {
		return nil, err
	}
	return rep.Holders, err
}
