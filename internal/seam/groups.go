package seam

var (
	// GroupMembers returns how many calls of a *snapid.Generator got
	// their numbers from another caller's counter update (they joined a
	// group commit as members rather than leading one).
	GroupMembers func(g any) uint64
	// GroupQueued returns how many callers of a *snapid.Generator are in
	// the group waiting for the update in progress (0: no group waits; 2
	// or more: a caller joined another's group).
	GroupQueued func(g any) int
)
