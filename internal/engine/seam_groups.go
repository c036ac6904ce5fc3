package engine

import "github.com/snapid/snapid/internal/seam"

// The simulator's view of group commit (see package internal/seam).
func init() {
	seam.GroupMembers = func(g any) uint64 {
		if gc := g.(*Generator).gc; gc != nil {
			return gc.members.Load()
		}
		return 0
	}
	seam.GroupQueued = func(g any) int {
		gc := g.(*Generator).gc
		if gc == nil {
			return 0
		}
		gc.mu.Lock()
		defer gc.mu.Unlock()
		if gc.open == nil {
			return 0
		}
		return max(1, len(gc.open.ks))
	}
}
