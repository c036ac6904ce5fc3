package registrytest

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/snapid/snapid/registry"
)

// The in-memory registry keeps sequences as the Cassandra one does: GLOBAL
// hands each data centre ranges of DCRange numbers (or more, for a lease
// that needs more), and the data centre's hosts lease from its own ranges.
// Every call is atomic. A registry's view is of data centre DC unless
// made by InDC.

// DC is the data centre of NewRegistry's view.
const DC = "memory"

// DCRange is how many numbers the in-memory registry's data centre takes
// from GLOBAL at a time.
const DCRange = 10_000

var _ registry.SequenceRegistry = (*Registry)(nil)

type memSequence struct {
	info   registry.SequenceInfo
	grants []registry.SequenceRange
	ranges []registry.SequenceRange
	leases map[string]registry.SequenceLease // by node name
}

func (m *memSequence) status() registry.SequenceStatus {
	st := registry.SequenceStatus{SequenceInfo: m.info, Grants: slices.Clone(m.grants), Ranges: slices.Clone(m.ranges)}
	for _, l := range m.leases {
		st.Leases = append(st.Leases, l)
	}
	slices.SortFunc(st.Leases, func(a, b registry.SequenceLease) int {
		if c := cmpString(a.Name, b.Name); c != 0 {
			return c
		}
		return cmpString(a.DC, b.DC)
	})
	return st
}

// inDC reports whether data centre dc has a range or a host lease of m.
func (m *memSequence) inDC(dc string) bool {
	for _, g := range m.ranges {
		if g.DC == dc {
			return true
		}
	}
	for _, l := range m.leases {
		if l.DC == dc {
			return true
		}
	}
	return false
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// CreateSequence implements registry.SequenceRegistry.CreateSequence.
func (r *Registry) CreateSequence(ctx context.Context, name string, start, max uint64) (registry.SequenceInfo, error) {
	if err := registry.CheckSequenceBounds(name, start, max); err != nil {
		return registry.SequenceInfo{}, err
	}
	if err := r.beginSerial(ctx, "create_sequence", name); err != nil {
		return registry.SequenceInfo{}, err
	}
	defer r.mu.Unlock()
	m, ok := r.seqs[name]
	if !ok {
		m = &memSequence{info: registry.SequenceInfo{Name: name, Start: start, Max: max, Next: start, CreatedAt: r.now()},
			leases: map[string]registry.SequenceLease{}}
		r.seqs[name] = m
		return m.info, nil
	}
	if err := registry.CheckSequenceUpdate(m.info, start, max); err != nil {
		return m.info, err
	}
	next := maxU(m.info.Next, start)
	if err := storable(name, nextAt(next, max)); err != nil {
		return m.info, err
	}
	if start > m.info.Start { // allowed only before anything was handed out
		m.info.Start = start
	}
	m.info.Max = max
	m.info.Next = next
	return m.info, nil
}

// The in-memory registry keeps Cassandra's limits: every number it
// stores fits a signed 64-bit column, and a next number is stored only
// while it is <= its row's last number (a used-up row stores none; see
// the cassandra package). nextAt is the value stored for next, 0 for
// none; storable refuses a value that would not fit, so that a registry
// storing max+1 = 2^63 fails here as it would in Cassandra.
func nextAt(next, last uint64) uint64 {
	if next > last {
		return 0
	}
	return next
}

func storable(seq string, vals ...uint64) error {
	for _, v := range vals {
		if v > math.MaxInt64 {
			return fmt.Errorf("registrytest: %w: sequence %q: %d does not fit a signed 64-bit column", registry.ErrRegistry, seq, v)
		}
	}
	return nil
}

func maxU(a, b uint64) uint64 {
	if a > b {
		return a
	}
	return b
}

// leaseKey is the key of a host's lease: a host's lease is its data
// centre's, as in Cassandra.
func leaseKey(dc, name string) string { return dc + "/" + name }

// serialHeld checks, holding r.mu, that the call's data centre reaches
// the cluster's quorum and that the request carries the name's current
// claim.
func (r *Registry) serialHeld(op string, req registry.LeaseRequest) error {
	if r.cut[r.dc] {
		return fmt.Errorf("registrytest: %w: %s %q: data centre %q is cut off from the cluster's quorum", registry.ErrRegistry, op, req.Sequence, r.dc)
	}
	_, err := r.held(op, req.Name, req.Owner, req.Session)
	return err
}

func (r *Registry) sequence(op, name string) (*memSequence, error) {
	m, ok := r.seqs[name]
	if !ok {
		return nil, fmt.Errorf("registrytest: %w: %s %q", registry.ErrNoSequence, op, name)
	}
	return m, nil
}

// LeaseSequence implements registry.SequenceRegistry.LeaseSequence.
func (r *Registry) LeaseSequence(ctx context.Context, req registry.LeaseRequest) (registry.SequenceLease, error) {
	if err := checkLeaseRequest(req); err != nil {
		return registry.SequenceLease{}, err
	}
	if err := r.begin(ctx, "lease", req.Sequence); err != nil {
		return registry.SequenceLease{}, err
	}
	defer r.mu.Unlock()
	m, err := r.sequence("lease", req.Sequence)
	if err != nil {
		return registry.SequenceLease{}, err
	}
	if cur, err := r.checkLeaseHolder(m, req); err != nil {
		return cur, err
	}
	i := m.rangeWithRoom(r.dc, req.Min)
	if i < 0 {
		if i, err = r.grantRange(m, req); err != nil {
			return registry.SequenceLease{}, err
		}
	}
	return r.leaseFrom(m, i, req)
}

// checkLeaseRequest refuses a lease request whose names, owner or sizes
// cannot be used.
func checkLeaseRequest(req registry.LeaseRequest) error {
	if err := registry.ValidateName(req.Sequence); err != nil {
		return fmt.Errorf("sequence name: %w", err)
	}
	if err := checkArgs(req.Name, req.Owner); err != nil {
		return err
	}
	if req.Min == 0 || req.Size < req.Min || req.Size > registry.MaxSequence {
		return invalid("lease of %d to %d numbers", req.Min, req.Size)
	}
	return nil
}

// checkLeaseHolder checks, holding r.mu, that the request may lease for
// the host. As in Cassandra: the host's row in the data centre shows
// whether the request is of the claim the host leased under (it must then
// present the host's lease as its previous one, or ErrLeaseMoved returns
// the host's lease); only when it is not is the name's row read (at
// SERIAL: not in a cut data centre). So a superseded claim goes on
// leasing until the new one leases.
func (r *Registry) checkLeaseHolder(m *memSequence, req registry.LeaseRequest) (registry.SequenceLease, error) {
	cur, ok := m.leases[leaseKey(r.dc, req.Name)]
	ours := ok && cur.Session == req.Session && cur.Owner == req.Owner
	if ours && (cur.First != req.PrevFirst || cur.Last != req.PrevLast) {
		return cur, fmt.Errorf("registrytest: %w: sequence %q: the host's lease is [%d, %d], not [%d, %d]",
			registry.ErrLeaseMoved, req.Sequence, cur.First, cur.Last, req.PrevFirst, req.PrevLast)
	}
	if !ours {
		if err := r.serialHeld("lease", req); err != nil {
			return registry.SequenceLease{}, err
		}
	}
	return registry.SequenceLease{}, nil
}

// rangeWithRoom returns the index of the first range of data centre dc
// with at least min numbers left, or -1.
func (m *memSequence) rangeWithRoom(dc string, min uint64) int {
	return slices.IndexFunc(m.ranges, func(g registry.SequenceRange) bool {
		return g.DC == dc && g.Next <= g.Last && g.Last-g.Next+1 >= min
	})
}

// grantRange takes a new range for the request's data centre from GLOBAL,
// holding r.mu, and returns its index in m.ranges: DCRange numbers, or
// req.Min if more, or what GLOBAL has left. A cut data centre cannot
// reach GLOBAL (ErrRegistry); a GLOBAL without req.Min numbers left is a
// *SequenceExhaustedError.
func (r *Registry) grantRange(m *memSequence, req registry.LeaseRequest) (int, error) {
	if r.cut[r.dc] {
		return -1, fmt.Errorf("registrytest: %w: lease %q: data centre %q has no range with room and is cut off from GLOBAL",
			registry.ErrRegistry, req.Sequence, r.dc)
	}
	info := m.info
	if info.Next > info.Max || info.Max-info.Next+1 < req.Min {
		return -1, m.exhausted(req.Sequence, r.dc, req.Min)
	}
	size := maxU(DCRange, req.Min)
	last := info.Max
	if info.Max-info.Next >= size {
		last = info.Next + size - 1
	}
	if err := storable(req.Sequence, info.Next, last, nextAt(last+1, info.Max)); err != nil {
		return -1, err
	}
	g := registry.SequenceRange{DC: r.dc, First: info.Next, Last: last, GrantedAt: r.now()}
	m.grants = append(m.grants, g)
	g.Next = g.First
	m.ranges = append(m.ranges, g)
	m.info.Next = last + 1
	return len(m.ranges) - 1, nil
}

// exhausted is the refusal of a lease of at least min numbers of sequence
// seq in data centre dc: what GLOBAL and dc's ranges have left, and the
// largest run among them.
func (m *memSequence) exhausted(seq, dc string, min uint64) *registry.SequenceExhaustedError {
	info := m.info
	e := &registry.SequenceExhaustedError{Sequence: seq, DC: dc, Max: info.Max, Wanted: min}
	if info.Next <= info.Max {
		e.GlobalLeft = info.Max - info.Next + 1
	}
	e.Largest = e.GlobalLeft
	for _, g := range m.ranges {
		left := uint64(0)
		if g.Next <= g.Last {
			left = g.Last - g.Next + 1
		}
		if g.DC != dc {
			// As in Cassandra: what other data centres' ranges hold.
			if e.OtherDCs == nil {
				e.OtherDCs = map[string]uint64{}
			}
			e.OtherDCs[g.DC] += left
			continue
		}
		e.DCLeft += left
		e.Largest = maxU(e.Largest, left)
	}
	return e
}

// leaseFrom leases from range i of m for the request, holding r.mu, and
// records the lease as the host's.
func (r *Registry) leaseFrom(m *memSequence, i int, req registry.LeaseRequest) (registry.SequenceLease, error) {
	g := &m.ranges[i]
	// As in Cassandra: at most an eighth of the range (or what the host
	// needs at the least), so that the data centre's hosts share it.
	n := min(req.Size, g.Last-g.Next+1, max(req.Min, (g.Last-g.First+1)/8))
	if err := storable(req.Sequence, g.Next, g.Next+n-1, nextAt(g.Next+n, g.Last)); err != nil {
		return registry.SequenceLease{}, err
	}
	l := registry.SequenceLease{Sequence: req.Sequence, DC: r.dc, Name: req.Name, Owner: req.Owner, Session: req.Session,
		First: g.Next, Last: g.Next + n - 1, LeasedAt: r.now()}
	g.Next += n
	m.leases[leaseKey(r.dc, req.Name)] = l
	return l, nil
}

// HostLease implements registry.SequenceRegistry.HostLease.
func (r *Registry) HostLease(ctx context.Context, sequence, name string) (registry.SequenceLease, error) {
	if err := registry.ValidateName(sequence); err != nil {
		return registry.SequenceLease{}, fmt.Errorf("sequence name: %w", err)
	}
	if err := registry.ValidateName(name); err != nil {
		return registry.SequenceLease{}, err
	}
	if err := r.begin(ctx, "host_lease", sequence); err != nil {
		return registry.SequenceLease{}, err
	}
	defer r.mu.Unlock()
	m := r.seqs[sequence]
	if m != nil {
		if l, ok := m.leases[leaseKey(r.dc, name)]; ok {
			return l, nil
		}
	}
	if (m == nil || !m.inDC(r.dc)) && r.cut[r.dc] {
		// As in Cassandra: with nothing of the sequence in the data
		// centre, whether it exists is read at SERIAL.
		return registry.SequenceLease{}, fmt.Errorf("registrytest: %w: host lease %q: data centre %q is cut off from the cluster's quorum", registry.ErrRegistry, sequence, r.dc)
	}
	if m == nil {
		return registry.SequenceLease{}, fmt.Errorf("registrytest: %w: host lease %q", registry.ErrNoSequence, sequence)
	}
	return registry.SequenceLease{}, nil
}

// SequenceStatus implements registry.SequenceRegistry.SequenceStatus.
func (r *Registry) SequenceStatus(ctx context.Context, name string) (registry.SequenceStatus, error) {
	if err := registry.ValidateName(name); err != nil {
		return registry.SequenceStatus{}, fmt.Errorf("sequence name: %w", err)
	}
	if err := r.beginSerial(ctx, "sequence_status", name); err != nil {
		return registry.SequenceStatus{}, err
	}
	defer r.mu.Unlock()
	m, err := r.sequence("status", name)
	if err != nil {
		return registry.SequenceStatus{}, err
	}
	return m.status(), nil
}

// ListSequences implements registry.SequenceRegistry.ListSequences; sorted
// by name.
func (r *Registry) ListSequences(ctx context.Context) ([]registry.SequenceStatus, error) {
	if err := r.beginSerial(ctx, "list_sequences", ""); err != nil {
		return nil, err
	}
	defer r.mu.Unlock()
	out := make([]registry.SequenceStatus, 0, len(r.seqs))
	for _, m := range r.seqs {
		out = append(out, m.status())
	}
	slices.SortFunc(out, func(a, b registry.SequenceStatus) int { return cmpString(a.Name, b.Name) })
	return out, nil
}

// Sequences returns every sequence as stored, sorted by name, whatever
// the outage switch and cuts say: for checks that a call changed nothing.
func (r *Registry) Sequences() []registry.SequenceStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]registry.SequenceStatus, 0, len(r.seqs))
	for _, m := range r.seqs {
		out = append(out, m.status())
	}
	slices.SortFunc(out, func(a, b registry.SequenceStatus) int { return cmpString(a.Name, b.Name) })
	return out
}

// PutSequence stores st as the sequence st.Name, whatever was there: for
// planting broken state (overlapping ranges, numbers above max) in tests
// of audits.
func (r *Registry) PutSequence(st registry.SequenceStatus) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := &memSequence{info: st.SequenceInfo, grants: slices.Clone(st.Grants), ranges: slices.Clone(st.Ranges),
		leases: map[string]registry.SequenceLease{}}
	for _, l := range st.Leases {
		m.leases[leaseKey(l.DC, l.Name)] = l
	}
	r.seqs[st.Name] = m
}

// CloseLease implements registry.SequenceRegistry.CloseLease.
func (r *Registry) CloseLease(ctx context.Context, l registry.SequenceLease, pos uint64) error {
	if err := registry.ValidateName(l.Sequence); err != nil {
		return fmt.Errorf("sequence name: %w", err)
	}
	if err := checkArgs(l.Name, l.Owner); err != nil {
		return err
	}
	if err := r.begin(ctx, "close_lease", l.Sequence); err != nil {
		return err
	}
	defer r.mu.Unlock()
	m, err := r.sequence("close lease", l.Sequence)
	if err != nil {
		return err
	}
	cur, ok := m.leases[leaseKey(r.dc, l.Name)]
	if !ok || cur.Session != l.Session || cur.First != l.First || cur.Last != l.Last {
		return fmt.Errorf("registrytest: %w: sequence %q: the host's lease is not [%d, %d] of this claim", registry.ErrLeaseMoved, l.Sequence, l.First, l.Last)
	}
	cur.ClosedAt = pos
	m.leases[leaseKey(r.dc, l.Name)] = cur
	return nil
}

// AdoptLease implements registry.SequenceRegistry.AdoptLease.
func (r *Registry) AdoptLease(ctx context.Context, a registry.LeaseAdoption) (registry.SequenceLease, error) {
	if err := registry.ValidateName(a.Sequence); err != nil {
		return registry.SequenceLease{}, fmt.Errorf("sequence name: %w", err)
	}
	if err := checkArgs(a.Name, a.Owner); err != nil {
		return registry.SequenceLease{}, err
	}
	if err := r.beginSerial(ctx, "adopt_lease", a.Sequence); err != nil {
		return registry.SequenceLease{}, err
	}
	defer r.mu.Unlock()
	m, err := r.sequence("adopt lease", a.Sequence)
	if err != nil {
		return registry.SequenceLease{}, err
	}
	if _, err := r.held("adopt lease", a.Name, a.Owner, a.Session); err != nil {
		return registry.SequenceLease{}, err
	}
	cur, ok := m.leases[leaseKey(r.dc, a.Name)]
	if !ok || a.Pos == 0 || cur.Session != a.OldSession || cur.First != a.First || cur.Last != a.Last || cur.ClosedAt != a.Pos {
		return cur, fmt.Errorf("registrytest: %w: sequence %q: the host's lease record does not match the lease file", registry.ErrLeaseMoved, a.Sequence)
	}
	cur.Session, cur.Owner, cur.ClosedAt = a.Session, a.Owner, 0
	m.leases[leaseKey(r.dc, a.Name)] = cur
	return cur, nil
}
