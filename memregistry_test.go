package snapid

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// memRegistry is an in-memory Registry with the semantics the Registry
// interface documents, for tests of the Generator's side of the registry
// that need no Cassandra. down makes every call fail as an unreachable
// registry would.
type memRegistry struct {
	mu       sync.Mutex
	rows     map[string]Holder
	down     bool
	now      func() time.Time
	sessions int
}

func newMemRegistry() *memRegistry {
	return &memRegistry{rows: map[string]Holder{}, now: time.Now}
}

func (m *memRegistry) setDown(down bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.down = down
}

func (m *memRegistry) row(name string) (Holder, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.rows[name]
	return h, ok
}

func (m *memRegistry) unreachable() error {
	if m.down {
		return fmt.Errorf("snapid: %w: test registry is down", ErrRegistry)
	}
	return nil
}

func (m *memRegistry) Claim(_ context.Context, c Claim) (Holder, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.unreachable(); err != nil {
		return Holder{}, err
	}
	now := m.now()
	h, ok := m.rows[c.Name]
	switch {
	case !ok:
		h = Holder{Name: c.Name, Owner: c.Owner, State: StateActive, RegisteredAt: now}
	case h.Owner == c.Owner:
		other := h.MachineID != c.MachineID || h.Hostname != c.Hostname
		if other && h.State == StateActive && c.CloneWindow > 0 && now.Sub(h.LastSeen) < c.CloneWindow {
			return h, fmt.Errorf("snapid: %w: %s", ErrProbableClone, h)
		}
	case h.State == StateReleased:
		h.Owner, h.RegisteredAt = c.Owner, now
	case c.Force:
		h.Owner, h.RegisteredAt = c.Owner, now
		h.Reserved = max(h.Reserved, c.Floor)
	default:
		return h, fmt.Errorf("snapid: %w: %q %s", ErrNameTaken, c.Name, h)
	}
	h.State, h.LastSeen = StateActive, now
	h.Hostname, h.Address, h.MachineID = c.Hostname, c.Address, c.MachineID
	m.sessions++
	h.Session = fmt.Sprintf("session-%d", m.sessions)
	m.rows[c.Name] = h
	return h, nil
}

func (m *memRegistry) held(name, owner, session string) (Holder, error) {
	if err := m.unreachable(); err != nil {
		return Holder{}, err
	}
	h, ok := m.rows[name]
	if !ok || h.Owner != owner || h.Session != session || h.State != StateActive {
		return h, fmt.Errorf("snapid: %w: %q", ErrNameTaken, name)
	}
	return h, nil
}

func (m *memRegistry) Extend(_ context.Context, name, owner, session string, old, new uint64) (Holder, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, err := m.held(name, owner, session)
	if err != nil {
		return h, err
	}
	if h.Reserved != old {
		return h, fmt.Errorf("snapid: %w: %d, not %d", ErrMarkMoved, h.Reserved, old)
	}
	h.Reserved, h.LastSeen = new, m.now()
	m.rows[name] = h
	return h, nil
}

func (m *memRegistry) Touch(_ context.Context, name, owner, session string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, err := m.held(name, owner, session)
	if err != nil {
		return err
	}
	h.LastSeen = m.now()
	m.rows[name] = h
	return nil
}

func (m *memRegistry) Release(_ context.Context, name, owner string, final uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.unreachable(); err != nil {
		return err
	}
	h, ok := m.rows[name]
	if !ok || h.Owner != owner {
		return fmt.Errorf("snapid: %w: %q", ErrNameTaken, name)
	}
	if final < h.Reserved {
		return fmt.Errorf("snapid: %w: final %d below the mark %d", ErrMarkMoved, final, h.Reserved)
	}
	h.State, h.Reserved, h.LastSeen = StateReleased, final, m.now()
	m.rows[name] = h
	return nil
}

func (m *memRegistry) Get(_ context.Context, name string) (Holder, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.unreachable(); err != nil {
		return Holder{}, err
	}
	h, ok := m.rows[name]
	if !ok {
		return Holder{}, fmt.Errorf("snapid: %w: %q", ErrNotRegistered, name)
	}
	return h, nil
}

func (m *memRegistry) List(context.Context) ([]Holder, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.unreachable(); err != nil {
		return nil, err
	}
	var out []Holder
	for _, h := range m.rows {
		out = append(out, h)
	}
	return out, nil
}
