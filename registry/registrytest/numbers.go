package registrytest

import (
	"context"
	"fmt"

	"github.com/snapid/snapid/registry"
)

var _ registry.NumberRegistry = (*Registry)(nil)

// AssignNumber implements registry.NumberRegistry.AssignNumber: the lowest
// number no name has, at the first call for a name.
func (r *Registry) AssignNumber(ctx context.Context, name, owner, session string) (uint64, error) {
	if err := checkArgs(name, owner); err != nil {
		return 0, err
	}
	if err := r.beginSerial(ctx, "assign_number", name); err != nil {
		return 0, err
	}
	defer r.mu.Unlock()
	h, err := r.held("assign number", name, owner, session)
	if err != nil {
		return 0, err
	}
	if h.Number != 0 {
		return h.Number, nil
	}
	used := map[uint64]bool{}
	for _, row := range r.rows {
		used[row.Number] = true
	}
	for n := range r.numbers {
		used[n] = true
	}
	n := uint64(1)
	for used[n] {
		n++
	}
	if n > registry.MaxNodeNumber {
		return 0, fmt.Errorf("registrytest: %w: every node number up to %d is taken", registry.ErrExhausted, uint64(registry.MaxNodeNumber))
	}
	r.numbers[n] = name
	h.Number = n
	r.rows[name] = h
	return n, nil
}

// SetStride implements registry.NumberRegistry.SetStride.
func (r *Registry) SetStride(ctx context.Context, stride uint64) (uint64, error) {
	if stride < 2 || stride > registry.MaxNodeNumber+1 {
		return 0, invalid("stride %d: want 2 to %d", stride, uint64(registry.MaxNodeNumber)+1)
	}
	if err := r.beginSerial(ctx, "set_stride", ""); err != nil {
		return 0, err
	}
	defer r.mu.Unlock()
	if r.stride != 0 && r.stride != stride {
		return r.stride, fmt.Errorf("registrytest: %w: the cluster's stride is %d, not %d", registry.ErrStrideMismatch, r.stride, stride)
	}
	r.stride = stride
	return stride, nil
}

// Stride implements registry.NumberRegistry.Stride.
func (r *Registry) Stride(ctx context.Context) (uint64, error) {
	if err := r.beginSerial(ctx, "stride", ""); err != nil {
		return 0, err
	}
	defer r.mu.Unlock()
	return r.stride, nil
}
