package cassandra

import (
	"context"
	"fmt"
	"time"

	"github.com/snapid/snapid/internal/cql"
	"github.com/snapid/snapid/registry"
)

// Get implements registry.Registry.Get: the row read at SERIAL consistency (which
// sees every LWT that completed, and completes one left in flight), or
// registry.ErrNotRegistered.
func (r *Registry) Get(ctx context.Context, name string) (registry.Holder, error) {
	if err := registry.ValidateName(name); err != nil {
		return registry.Holder{}, err
	}
	var rec cql.Record
	found, err := r.serialRead(ctx, "get", &rec, name)
	if err != nil {
		return registry.Holder{}, fmt.Errorf("snapid: %w: get %q: %w", registry.ErrRegistry, name, err)
	}
	if !found {
		return registry.Holder{}, fmt.Errorf("snapid: %w: %q", registry.ErrNotRegistered, name)
	}
	h := rec.Holder()
	// The node number, if it can be read (a role may read the names'
	// table alone): without it the row is still the row.
	if n, err := r.nameNumber(ctx, name); err == nil {
		h.Number = n
	} else {
		r.log.Debug("snapid: reading a node number failed", "name", name, "err", err)
	}
	return h, nil
}

// List implements registry.Registry.List: every row, read page by page at the
// configured consistency (not serial: a row being changed at that moment
// may show its previous state). Rows are in token order. Node numbers
// come from their table read whole; a name with none there but a number
// taken for it has its number read at SERIAL (see NodeNumber), so that
// an assignment whose answer was lost shows as it will settle:
// NumberTaken if it still has none.
func (r *Registry) List(ctx context.Context) ([]registry.Holder, error) {
	l, lists := r.q.(cql.RowLister)
	if r.session == nil && !lists {
		return nil, fmt.Errorf("snapid: %w: list: no session", registry.ErrRegistry)
	}
	var out []registry.Holder
	err := retryReadWait(ctx, r.log, r.wait, "list", r.tbl, func(ctx context.Context) error {
		out = nil
		if lists {
			recs, err := l.List(ctx)
			for i := range recs {
				out = append(out, recs[i].Holder())
			}
			return err
		}
		iter := r.session.Query(r.stmts.selectAll).PageSize(r.pageSize).IterContext(ctx)
		for {
			var rec cql.Record
			if !iter.Scan(rec.Dests()...) {
				break
			}
			out = append(out, rec.Holder())
		}
		return iter.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("snapid: %w: list: %w", registry.ErrRegistry, err)
	}
	nums, err := r.nameNumbers(ctx)
	if err == nil {
		err = r.settleNumbers(ctx, nums, out)
	}
	if err != nil {
		r.log.Warn("snapid: reading node numbers failed; the rows are listed without them", "err", err)
		for i := range out {
			out[i].Number, out[i].NumberTaken, out[i].NumberTakenAt = 0, 0, time.Time{}
		}
	}
	return out, nil
}
