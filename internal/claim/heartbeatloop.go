package claim

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/snapid/snapid/internal/errs"
)

// One heartbeat per host. One process of the host, the holder, refreshes
// the claim's last-seen in the registry once per heartbeat interval for
// all of the host's processes, so the registry's load grows with hosts,
// not processes.
//
//	<counter>.heartbeat   40 bytes: "snaphb02", a hash of the claim's
//	                      session, when the last refresh that reached the
//	                      registry was sent and when the last one was tried
//	                      (Unix nanoseconds, by the registry side's clock),
//	                      and a state (bit 0: the registry said the name is
//	                      another owner's; bit 1: the last try was the
//	                      holder's after a failure of its own); every field
//	                      is 64 bits little-endian. An exclusive flock on it
//	                      makes its holder the host's heartbeat; updates
//	                      take a lock on its bytes (an OFD lock, apart from
//	                      the flock) to read and write the record as one,
//	                      waiting for it at most heartbeatLockWait: past
//	                      that (a stopped process holds it) the update is
//	                      made without it. A record longer than 40 bytes
//	                      is cut back to them at the next update.
//
// Every process polls four times per interval: it tries the flock (a
// system call, no registry) and reads the record. The holder refreshes
// last-seen at the first poll after the last refresh was sent an interval
// ago (less half a poll, for a late tick): one refresh per interval; after
// a failed refresh it tries again two, then four polls later, not at
// every poll. When the holder exits, closes or crashes, its flock is
// dropped and the next poll of another process takes the role. A holder
// that stalls without exiting (SIGSTOP mid-call, a hung disk), whose own
// calls fail while others' would not, or a flock held by someone who does
// not refresh, would leave last-seen stale: a process that finds the last
// refresh an interval and a half old and the last try half an interval
// old refreshes whether or not it holds the flock, and a try the holder
// made after a failure of its own does not hold it back (see
// HeartbeatDue). A try is written to the record before it is sent, under
// the byte lock, where the process decides again: of processes due at the
// same poll, one sends. So while the holder, or else every other process
// of the host, can reach the registry, last-seen is at most an interval
// and seven eighths plus a timeout old, inside the clone window (at least
// two intervals plus a timeout, see WithCloneWindow); and during an outage
// the host tries about twice per interval, not once per poll and process.
//
// Each process sends at most one refresh at a time, in the background: a
// refresh that hangs until its timeout does not keep the process from
// reading the record. A refresh the registry refuses because the name is
// another owner's (errs.ErrNameTaken) is written to the record, and every
// process of the host stops issuing at its next poll. A success never
// overwrites that state for the same session (the update reads the record
// under the byte lock first).
//
// The record is written in place and never synced: it only tells the
// host's running processes what the registry said, and after a power cut
// they are all gone. A damaged or foreign record reads as none (the next
// poll refreshes). The file is created, checked and opened like the mark
// file, and never removed. Each poll also checks that the file at the path
// is still the one the process has open (device and inode): one removed or
// replaced while the host runs would split its processes into two hosts'
// worth of records and holders, so each rejoins the file at the path (see
// rejoinHeartbeat).
//
// The record also spares joins a registry read: a process joining its
// host's claim while the record shows a refresh of this claim's session
// sent less than an interval ago trusts the session file (see verifyJoin),
// which is what lets a whole host start at once without a registry read
// per process. The first process writes the record at its claim.

// heartbeat runs until close: the host's one refresh of last-seen (see
// above), and every process's watch for the name being taken over.
func (r *Reservation) heartbeat() {
	defer r.wg.Done()
	defer r.hbDone.Store(true) // after the timer is stopped
	defer r.hbHolder.Store(false)
	poll := Poll(r.o.Heartbeat)
	// A timer armed again once a poll is done (not a ticker): a fake
	// clock's test sees the loop idle when its timer is armed.
	t := r.o.Clock.NewTimer(poll)
	defer t.Stop()
	hb := &heartbeatLoop{mine: SessionHash(r.session)}
	for ; ; t.Reset(poll) {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C():
		}
		if r.pollHeartbeat(hb) {
			return
		}
	}
}

// heartbeatLoop is what the heartbeat loop of a process keeps from one
// poll to the next.
type heartbeatLoop struct {
	holder       bool         // the process holds the host's heartbeat role
	mine         uint64       // the hash of the process's session
	fails        atomic.Int64 // the holder's failed refreshes in a row
	rejoinFailed bool         // the last check of the file's identity failed (logged once)
}

// pollHeartbeat is one poll of the heartbeat loop: it rejoins a heartbeat
// file removed or replaced, takes the role if no process holds it, stops
// issuing once the record says the name was taken, and starts a refresh
// when the host's is due. It reports whether the loop ends.
func (r *Reservation) pollHeartbeat(hb *heartbeatLoop) (stop bool) {
	r.rejoinHeartbeatFile(hb)
	if !hb.holder {
		hb.holder = r.host.TryHeartbeatRole()
		r.hbHolder.Store(hb.holder)
	}
	rec, ok := r.host.ReadHeartbeat()
	if ok && rec.Taken && rec.Session == hb.mine {
		r.loseName(fmt.Errorf("snapid: %w: another process of this host was told so by the registry", errs.ErrNameTaken))
		return true
	}
	if errp := r.lost.Load(); errp != nil {
		return true
	}
	if r.touching.Load() {
		return false // a refresh of this process is in flight
	}
	if !ok || rec.Session != hb.mine {
		rec = Heartbeat{}
	}
	now := r.o.Clock.Now()
	failed := hb.fails.Load()
	if !HeartbeatDue(rec, now, r.o.Heartbeat, hb.holder, failed) {
		return false
	}
	if r.recordTry(hb, now, failed) {
		r.startTouch(hb, now)
	}
	return false
}

// rejoinHeartbeatFile, when the heartbeat file was removed or replaced
// while the host runs, rejoins the one at the path, so that the host
// keeps one record and one holder; a process that rejoins gives up the
// role. A failure is logged once, until a check succeeds.
func (r *Reservation) rejoinHeartbeatFile(hb *heartbeatLoop) {
	switch replaced, err := r.host.RejoinHeartbeat(hb.mine); {
	case err != nil:
		if !hb.rejoinFailed {
			r.log.Warn("snapid: the heartbeat file was removed or replaced, and the one at its path cannot be used; this process keeps the one it has", "name", r.name, "err", err)
		}
		hb.rejoinFailed = true
	case replaced:
		r.log.Info("snapid: the heartbeat file was removed or replaced; this process uses the one at its path now", "name", r.name)
		hb.holder, hb.rejoinFailed = false, false
		r.hbHolder.Store(false)
	default:
		hb.rejoinFailed = false
	}
}

// recordTry records the try of a refresh found due at now before it is
// sent, deciding again under the record's lock: of processes that found
// the host due at the same moment, only the first sends. It reports
// whether this process sends it (a failure to record the try is logged,
// and does not keep it from sending).
func (r *Reservation) recordTry(hb *heartbeatLoop, now time.Time, failed int64) (due bool) {
	due = true
	if err := r.host.UpdateHeartbeat(hb.mine, func(rec *Heartbeat) bool {
		if !hb.holder && !HeartbeatDue(*rec, now, r.o.Heartbeat, false, 0) {
			due = false
			return false
		}
		rec.Tried = now.UnixNano()
		rec.Retry = hb.holder && failed > 0
		return true
	}); err != nil {
		r.heartbeatLog.failed(err, "name", r.name)
	}
	return due
}

// startTouch sends a refresh stamped now in the background, counting the
// holder's failed refreshes in a row.
func (r *Reservation) startTouch(hb *heartbeatLoop, now time.Time) {
	r.touching.Store(true)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer r.touching.Store(false)
		if r.touch(now) {
			hb.fails.Store(0)
		} else {
			hb.fails.Add(1)
		}
	}()
}

// touch sends one refresh of last-seen, stamped sent (its try is in the
// record already), and records the answer for the host's processes; it
// reports whether the refresh reached the registry.
func (r *Reservation) touch(sent time.Time) bool {
	mine := SessionHash(r.session)
	ctx, cancel := r.o.Clock.WithTimeout(r.ctx, r.o.Timeout)
	err := r.reg.Touch(ctx, r.name, r.host.Owner(), r.session)
	cancel()
	switch {
	case errors.Is(err, errs.ErrNameTaken):
		r.loseName(err)
		if werr := r.host.UpdateHeartbeat(mine, func(rec *Heartbeat) bool {
			rec.Taken = true
			return true
		}); werr != nil {
			r.log.Warn("snapid: the host's other processes could not be told", "name", r.name, "err", werr)
		}
		return false
	case err != nil:
		if r.ctx.Err() == nil {
			r.heartbeatLog.failed(err, "name", r.name)
		}
		return false
	}
	r.heartbeatLog.succeeded("name", r.name)
	var taken bool
	if werr := r.host.UpdateHeartbeat(mine, func(rec *Heartbeat) bool {
		if rec.Taken {
			taken = true // another process learned of a take-over after this refresh was sent
			return false
		}
		// Later sends of other processes are kept; times in the future
		// (a clock set back since, a damaged record) are not, or the
		// record would read as never refreshed until that time.
		now := r.o.Clock.Now().UnixNano()
		for _, t := range []*int64{&rec.Tried, &rec.Last} {
			if *t > now || *t < sent.UnixNano() {
				*t = sent.UnixNano()
			}
		}
		return true
	}); werr != nil {
		r.heartbeatLog.failed(werr, "name", r.name)
	}
	if taken {
		r.loseName(fmt.Errorf("snapid: %w: another process of this host was told so by the registry", errs.ErrNameTaken))
		return false
	}
	return true
}

// loseName stops issuing under the name for good (the first reason
// given is kept).
func (r *Reservation) loseName(err error) {
	if r.lost.CompareAndSwap(nil, &err) {
		r.log.Error("snapid: node name taken over by another owner; no more ids will be issued", "name", r.name, "err", err)
	}
}

// tellTaken stops issuing under the name, as loseName does, and writes
// "taken" to the host's record so that the host's other processes stop at
// their next poll: for the registry's errs.ErrNameTaken learned outside the
// heartbeat (an extension).
func (r *Reservation) tellTaken(err error) {
	r.lost.CompareAndSwap(nil, &err)
	if werr := r.host.UpdateHeartbeat(SessionHash(r.session), func(rec *Heartbeat) bool {
		rec.Taken = true
		return true
	}); werr != nil {
		r.log.Warn("snapid: the host's other processes could not be told", "name", r.name, "err", werr)
	}
}

// lastHostHeartbeat returns when the host's heartbeat last reached the
// registry for this process's claim, or the zero time.
func (r *Reservation) LastHostHeartbeat() time.Time {
	rec, ok := r.host.ReadHeartbeat()
	if !ok || rec.Taken || rec.Session != SessionHash(r.session) || rec.Last <= 0 {
		return time.Time{}
	}
	return time.Unix(0, rec.Last)
}
