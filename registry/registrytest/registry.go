// Package registrytest helps test programs that embed snapid, and
// implementations of registry.Registry.
//
// Registry is an in-memory registry.Registry with the semantics the
// interface documents and an outage switch, so that a program's tests can
// open Generators with it (snapid.Config.Registry), take the registry away
// and bring it back, without a Cassandra. TestRegistry is the conformance
// suite that every Registry implementation must pass; snapid runs it on
// this in-memory registry and on the Cassandra one.
//
// Imports: package registry only (no database driver, nothing of snapid's
// root package). Imported by tests: snapid's
// own, those of cassandra and internal/powerfs, embedders', and the
// simulator (internal/sim, which only tests run).
package registrytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/snapid/snapid/registry"
)

// Registry is an in-memory registry.Registry. The zero value is not usable:
// call NewRegistry. It is safe for concurrent use; every method call is
// atomic with respect to the others, which is what the lightweight
// transactions of a real registry give.
//
// A Registry is one data centre's view (DC by default) of a store that
// views made by InDC share: names are the cluster's, a sequence's ranges
// and host leases are each data centre's own, as in Cassandra.
type Registry struct {
	*store
	dc string
}

// store is what a registry's views share.
type store struct {
	mu   sync.Mutex
	rows map[string]registry.Holder
	down bool
	cut  map[string]bool // data centres cut off from the cluster's quorum
	now  func() time.Time
	hook func(ctx context.Context, op, name string) error
	seqs map[string]*memSequence // sequences (see sequence.go)
	// numbers: node numbers given (see numbers.go), to their names; the
	// cluster's stride (0: none recorded).
	numbers map[uint64]string
	stride  uint64
}

var _ registry.Registry = (*Registry)(nil)

// NewRegistry returns an empty in-memory registry that is up, seen from
// data centre DC.
func NewRegistry() *Registry {
	return &Registry{store: &store{rows: map[string]registry.Holder{}, now: time.Now, seqs: map[string]*memSequence{},
		cut: map[string]bool{}, numbers: map[uint64]string{}}, dc: DC}
}

// InDC returns a view of the same registry from data centre dc: its
// hosts take sequence numbers from dc's own ranges and leases; names,
// sequences and everything else are shared with r. It panics on an
// invalid data centre name (a test's mistake).
func (r *Registry) InDC(dc string) *Registry {
	if err := registry.ValidateName(dc); err != nil {
		panic("registrytest: InDC: " + err.Error())
	}
	return &Registry{store: r.store, dc: dc}
}

// DC returns the data centre r sees the registry from.
func (r *Registry) DC() string { return r.dc }

// SetCut cuts data centre dc off from the rest of the cluster (true), as
// a network partition that leaves it without a quorum of the cluster
// would, or heals it (false). While it is cut, calls through its views
// that need that quorum fail with an error wrapping registry.ErrRegistry
// and change nothing: every call on names, creating a sequence, its
// status, a range granted from the sequence's GLOBAL row, a host's first
// lease under a claim (which reads the name's row) and adopting a lease.
// Calls that need only the data centre go on: a lease from its own
// ranges under the claim it already leased with, a host's lease, closing
// a lease. Views of other data centres are not affected.
func (r *Registry) SetCut(dc string, cut bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cut[dc] = cut
}

// SetDown takes the registry away (true) or brings it back (false). While
// it is down every call fails with an error wrapping registry.ErrRegistry and
// changes nothing, as an unreachable Cassandra would.
func (r *Registry) SetDown(down bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.down = down
}

// SetClock replaces the clock that stamps registered-at and last-seen
// (default time.Now), for tests of clone windows and stale holders.
func (r *Registry) SetClock(now func() time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.now = now
}

// SetHook installs fn, called at the start of every call with the
// operation ("claim", "extend", "touch", "release", "get", "list", for
// sequences "create_sequence", "lease", "host_lease", "sequence_status",
// "list_sequences", and for node numbers "assign_number", "set_stride",
// "stride") and the
// name ("" for list), before the registry's lock is taken: it may block (to
// hold a call in flight) or return an error, which the call then returns
// without changing anything. nil removes it.
func (r *Registry) SetHook(fn func(ctx context.Context, op, name string) error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hook = fn
}

// Row returns the row of name as stored, and whether there is one.
func (r *Registry) Row(name string) (registry.Holder, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.rows[name]
	return h, ok
}

// Put stores h as the row of h.Name, whatever was there: for planting rows
// (stale holders, partial rows) in tests of audits.
func (r *Registry) Put(h registry.Holder) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows[h.Name] = h
}

// begin runs the hook and checks the context and the outage switch; on
// success the caller holds r.mu.
func (r *Registry) begin(ctx context.Context, op, name string) error {
	r.mu.Lock()
	hook := r.hook
	r.mu.Unlock()
	if hook != nil {
		if err := hook(ctx, op, name); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("registrytest: %w: %s %q: nothing sent: %w", registry.ErrRegistry, op, name, err)
	}
	r.mu.Lock()
	if r.down {
		r.mu.Unlock()
		return fmt.Errorf("registrytest: %w: %s %q: the test registry is down", registry.ErrRegistry, op, name)
	}
	return nil
}

// serial checks, holding r.mu after begin, that the call's data centre
// reaches the cluster's quorum; if not it releases r.mu and fails.
func (r *Registry) serial(op, name string) error {
	if r.cut[r.dc] {
		r.mu.Unlock()
		return fmt.Errorf("registrytest: %w: %s %q: data centre %q is cut off from the cluster's quorum", registry.ErrRegistry, op, name, r.dc)
	}
	return nil
}

// beginSerial is begin for a call that needs the cluster's quorum.
func (r *Registry) beginSerial(ctx context.Context, op, name string) error {
	if err := r.begin(ctx, op, name); err != nil {
		return err
	}
	return r.serial(op, name)
}

func invalid(format string, args ...any) error {
	return fmt.Errorf("registrytest: %w: %s", registry.ErrInvalidOption, fmt.Sprintf(format, args...))
}

func checkArgs(name, owner string) error {
	if err := registry.ValidateName(name); err != nil {
		return err
	}
	if owner == "" {
		return invalid("empty owner token")
	}
	return nil
}

func newSession() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("registrytest: crypto/rand failed: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// Claim implements registry.Registry.Claim.
func (r *Registry) Claim(ctx context.Context, c registry.Claim) (registry.Holder, error) {
	if err := checkArgs(c.Name, c.Owner); err != nil {
		return registry.Holder{}, err
	}
	if c.CloneWindow < 0 {
		return registry.Holder{}, invalid("negative clone window %v", c.CloneWindow)
	}
	if err := r.beginSerial(ctx, "claim", c.Name); err != nil {
		return registry.Holder{}, err
	}
	defer r.mu.Unlock()
	now := r.now()
	h, ok := r.rows[c.Name]
	switch {
	case !ok:
		h = registry.Holder{Name: c.Name, Owner: c.Owner, RegisteredAt: now, Reserved: c.Floor}
	case h.Owner == c.Owner:
		other := h.MachineID != c.MachineID || h.Hostname != c.Hostname
		if other && h.State == registry.StateActive && c.CloneWindow > 0 && now.Sub(h.LastSeen) < c.CloneWindow {
			return h, fmt.Errorf("registrytest: %w: %q is active with this owner token on another machine: %s", registry.ErrProbableClone, c.Name, h)
		}
	case h.State == registry.StateReleased && h.Owner != "":
		h.Owner, h.RegisteredAt = c.Owner, now
	case c.Force:
		h.Owner, h.RegisteredAt = c.Owner, now
	default:
		return h, fmt.Errorf("registrytest: %w: %q is %s", registry.ErrNameTaken, c.Name, h)
	}
	h.State, h.LastSeen = registry.StateActive, now
	h.Reserved = max(h.Reserved, c.Floor)
	h.Hostname, h.Address, h.MachineID = c.Hostname, c.Address, c.MachineID
	h.Session = newSession()
	r.rows[c.Name] = h
	return h, nil
}

// held returns the row if owner holds name active under session; the
// caller holds r.mu.
func (r *Registry) held(op, name, owner, session string) (registry.Holder, error) {
	h, ok := r.rows[name]
	switch {
	case !ok:
		return h, fmt.Errorf("registrytest: %w: %s %q: the name has no row (%w)", registry.ErrNameTaken, op, name, registry.ErrNotRegistered)
	case h.Owner != owner || h.Session != session || h.State != registry.StateActive:
		return h, fmt.Errorf("registrytest: %w: %s %q: not held by this owner and session: %s", registry.ErrNameTaken, op, name, h)
	}
	return h, nil
}

// Extend implements registry.Registry.Extend.
func (r *Registry) Extend(ctx context.Context, name, owner, session string, old, new uint64) (registry.Holder, error) {
	if err := checkArgs(name, owner); err != nil {
		return registry.Holder{}, err
	}
	if err := r.beginSerial(ctx, "extend", name); err != nil {
		return registry.Holder{}, err
	}
	defer r.mu.Unlock()
	h, err := r.held("extend", name, owner, session)
	if err != nil {
		return h, err
	}
	if h.Reserved != old {
		return h, fmt.Errorf("registrytest: %w: %q: the registry's mark is %d, not %d", registry.ErrMarkMoved, name, h.Reserved, old)
	}
	h.Reserved, h.LastSeen = new, r.now()
	r.rows[name] = h
	return h, nil
}

// Touch implements registry.Registry.Touch.
func (r *Registry) Touch(ctx context.Context, name, owner, session string) error {
	if err := checkArgs(name, owner); err != nil {
		return err
	}
	if err := r.beginSerial(ctx, "touch", name); err != nil {
		return err
	}
	defer r.mu.Unlock()
	h, err := r.held("touch", name, owner, session)
	if err != nil {
		return err
	}
	h.LastSeen = r.now()
	r.rows[name] = h
	return nil
}

// Release implements registry.Registry.Release.
func (r *Registry) Release(ctx context.Context, name, owner string, final uint64) error {
	if err := checkArgs(name, owner); err != nil {
		return err
	}
	if err := r.beginSerial(ctx, "release", name); err != nil {
		return err
	}
	defer r.mu.Unlock()
	h, ok := r.rows[name]
	switch {
	case !ok:
		return fmt.Errorf("registrytest: %w: release %q: the name has no row (%w)", registry.ErrNameTaken, name, registry.ErrNotRegistered)
	case h.Owner != owner:
		return fmt.Errorf("registrytest: %w: release %q: another owner has it: %s", registry.ErrNameTaken, name, h)
	case final < h.Reserved:
		return fmt.Errorf("registrytest: %w: release %q: the registry's mark %d is above the final value %d", registry.ErrMarkMoved, name, h.Reserved, final)
	}
	h.State, h.Reserved, h.LastSeen = registry.StateReleased, final, r.now()
	r.rows[name] = h
	return nil
}

// Get implements registry.Registry.Get.
func (r *Registry) Get(ctx context.Context, name string) (registry.Holder, error) {
	if err := registry.ValidateName(name); err != nil {
		return registry.Holder{}, err
	}
	if err := r.beginSerial(ctx, "get", name); err != nil {
		return registry.Holder{}, err
	}
	defer r.mu.Unlock()
	h, ok := r.rows[name]
	if !ok {
		return registry.Holder{}, fmt.Errorf("registrytest: %w: %q", registry.ErrNotRegistered, name)
	}
	return h, nil
}

// List implements registry.Registry.List; rows come sorted by name.
func (r *Registry) List(ctx context.Context) ([]registry.Holder, error) {
	if err := r.beginSerial(ctx, "list", ""); err != nil {
		return nil, err
	}
	defer r.mu.Unlock()
	out := make([]registry.Holder, 0, len(r.rows))
	for _, h := range r.rows {
		out = append(out, h)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
