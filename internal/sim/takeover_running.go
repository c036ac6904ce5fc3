package sim

// oldHolderIssues asks every process of ho still running for one number
// after its name was taken over by another host: the old holder keeps
// issuing until it learns of the take-over (numbers inside what it had
// reserved, never one the new holder hands out), then refuses. It
// reports whether any process of ho was running.
func (w *world) oldHolderIssues(ho *host) bool {
	running := false
	for p, g := range ho.procs {
		if g == nil {
			continue
		}
		running = true
		id, err := g.UniqueIDContext(w.opCtx())
		if err != nil {
			ho.dense = false // a call that failed may leave a gap
			continue
		}
		w.did(1)
		w.check.issuedID(ho, p, id)
	}
	return running
}
