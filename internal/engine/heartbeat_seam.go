package engine

import "github.com/snapid/snapid/internal/seam"

// The simulator's view of a Generator's heartbeat (seam.Heartbeat): it
// moves each host's clock itself and, after each move, waits until every
// heartbeat loop the move woke is back waiting on the clock.
func init() {
	seam.Step = func(g any) uint64 {
		if r := g.(*Generator).res; r != nil {
			return r.step()
		}
		return 0
	}
	seam.Heartbeat = func(g any) seam.HeartbeatState {
		r := g.(*Generator).res
		if r == nil {
			return seam.HeartbeatState{}
		}
		st := seam.HeartbeatState{
			Running: !r.hbDone.Load(),
			Busy:    r.touching.Load(),
			Holder:  r.hbHolder.Load(),
			Session: r.session,
		}
		if errp := r.lost.Load(); errp != nil {
			st.Lost = *errp
		}
		return st
	}
}
