package seam

// HeartbeatState is what the simulator sees of a Generator's heartbeat
// (heartbeat.go in package internal/engine): enough to wait until the loop is idle
// on its clock, and to tell which process holds the host's role.
type HeartbeatState struct {
	Running bool   // the loop has not returned (a Generator with a registry, not closed, not crashed, its name not lost)
	Busy    bool   // a refresh (Touch) of this process is in flight
	Holder  bool   // the process holds the host's heartbeat role
	Session string // the session of the host's claim the process runs under
	Lost    error  // why the process stopped issuing under its name (ErrNameTaken), or nil
}

// Heartbeat returns the heartbeat state of a *snapid.Generator; the zero
// state for one without a registry.
var Heartbeat func(g any) HeartbeatState

// Step returns the size of a *snapid.Generator's current reservation
// step (0 without a registry): the simulator checks it against the
// step's growth cap at every extension.
var Step func(g any) uint64
