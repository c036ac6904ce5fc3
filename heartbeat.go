package snapid

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"time"

	"github.com/snapid/snapid/internal/statefile"
	"golang.org/x/sys/unix"
)

// One heartbeat per host. Every process of a host used to refresh the
// claim's last-seen in the registry once per heartbeat interval, so the
// registry's load grew with processes; now one process of the host, the
// holder, does it for all of them.
//
//	<counter>.heartbeat   32 bytes: "snaphb01", a hash of the claim's
//	                      session, the time of the last refresh that
//	                      reached the registry (Unix nanoseconds), and a
//	                      state (0: the claim stands, 1: the registry said
//	                      the name is another owner's); every field is
//	                      64 bits little-endian. An exclusive flock on it
//	                      makes its holder the host's heartbeat.
//
// Every process polls four times per interval: it tries the flock (a
// system call, no registry) and reads the record. The holder refreshes
// last-seen when the record is an interval old and writes the record; the
// others only read it. When the holder exits or crashes, the kernel drops
// its flock and the next poll of another process takes the role, within a
// quarter of an interval, and refreshes at once if the record is due. A
// holder that stopped without exiting (SIGSTOP, a hung disk) or a flock
// held by someone who does not refresh would leave last-seen stale, so a
// process that finds the record one and a half intervals old refreshes
// whether or not it holds the flock: last-seen is never more than about
// 1.75 intervals old while a process of the host runs, below the clone
// window's two intervals plus a timeout (see WithCloneWindow).
//
// A refresh the registry refuses because the name is another owner's
// (ErrNameTaken) is written to the record, and every process of the host
// stops issuing at its next poll, as each did at its own refresh before.
//
// The record is written in place and never synced: it only tells the
// host's running processes what the registry said, and after a power cut
// they are all gone. A damaged or foreign record reads as none (the next
// poll refreshes). The file is created, checked and opened like the mark
// file, and never removed.
//
// The record also spares joins a registry read: a process joining its
// host's claim while the record shows a refresh of this claim's session
// less than an interval ago trusts the session file (see verifyJoin),
// which is what lets a whole host start at once without a registry read
// per process. The first process writes the record at its claim.
const (
	heartbeatSuffix = ".heartbeat"
	heartbeatMagic  = "snaphb01"
	heartbeatSize   = 32
)

// heartbeatRecord is the content of the heartbeat file.
type heartbeatRecord struct {
	session uint64 // sessionHash of the claim's session
	last    int64  // Unix nanoseconds of the last refresh that reached the registry
	taken   bool   // the registry said the name is another owner's
}

// sessionHash identifies a session in the record (FNV-1a, 64 bits).
func sessionHash(session string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(session))
	return h.Sum64()
}

func encodeHeartbeat(r heartbeatRecord) []byte {
	b := make([]byte, heartbeatSize)
	copy(b, heartbeatMagic)
	binary.LittleEndian.PutUint64(b[8:], r.session)
	binary.LittleEndian.PutUint64(b[16:], uint64(r.last))
	if r.taken {
		binary.LittleEndian.PutUint64(b[24:], 1)
	}
	return b
}

// decodeHeartbeat returns the record in b; ok is false for anything but a
// whole record this version writes.
func decodeHeartbeat(b []byte) (r heartbeatRecord, ok bool) {
	if len(b) != heartbeatSize || string(b[:8]) != heartbeatMagic {
		return heartbeatRecord{}, false
	}
	state := binary.LittleEndian.Uint64(b[24:])
	if state > 1 {
		return heartbeatRecord{}, false
	}
	return heartbeatRecord{
		session: binary.LittleEndian.Uint64(b[8:]),
		last:    int64(binary.LittleEndian.Uint64(b[16:])),
		taken:   state == 1,
	}, true
}

// openHeartbeat creates (if absent) and opens the heartbeat file beside
// the counter at counterPath, checked like the mark file.
func openHeartbeat(counterPath string, o *options) (*os.File, error) {
	path := counterPath + heartbeatSuffix
	if err := createIfAbsent(path, nil, o); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, openFlags(o.followSymlinks), 0)
	if err != nil {
		return nil, &FileError{Op: "open", Path: path, Err: classifyOpenError(err)}
	}
	st, err := statefile.CheckRegular(int(f.Fd()))
	if err == nil {
		err = statefile.CheckOwner(path, st)
	}
	if err != nil {
		f.Close()
		return nil, &FileError{Op: "open", Path: path, Err: classifyOpenError(err)}
	}
	return f, nil
}

// readHeartbeat reads the record; a missing, short or foreign one is ok
// false.
func (h *hostState) readHeartbeat() (heartbeatRecord, bool) {
	if h.hb == nil {
		return heartbeatRecord{}, false
	}
	b := make([]byte, heartbeatSize+1)
	n, err := h.hb.ReadAt(b, 0)
	if err != nil && n != heartbeatSize {
		return heartbeatRecord{}, false
	}
	return decodeHeartbeat(b[:n])
}

// writeHeartbeat writes the record in place, unsynced.
func (h *hostState) writeHeartbeat(r heartbeatRecord) error {
	if h.hb == nil {
		return nil
	}
	if _, err := h.hb.WriteAt(encodeHeartbeat(r), 0); err != nil {
		return &FileError{Op: "write", Path: h.hb.Name(), Err: err}
	}
	return nil
}

// tryHeartbeatRole takes the host's heartbeat role if no other process
// holds it. It never waits.
func (h *hostState) tryHeartbeatRole() bool {
	if h.hb == nil {
		return false
	}
	for {
		err := unix.Flock(int(h.hb.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if !errors.Is(err, unix.EINTR) {
			return err == nil
		}
	}
}

// heartbeatPoll is how often each process looks at the heartbeat role
// and record.
func heartbeatPoll(interval time.Duration) time.Duration {
	return max(interval/4, time.Millisecond)
}

// freshClaim reports whether the record shows a refresh of this session
// less than an interval ago (and not in the future: a clock set back
// makes no record fresh).
func freshClaim(rec heartbeatRecord, ok bool, session string, now time.Time, interval time.Duration) bool {
	if !ok || rec.taken || rec.session != sessionHash(session) {
		return false
	}
	age := now.Sub(time.Unix(0, rec.last))
	return age >= 0 && age < interval
}

// heartbeat runs until close: the host's one refresh of last-seen (see
// above), and every process's watch for the name being taken over.
func (r *reservation) heartbeat() {
	defer r.wg.Done()
	t := time.NewTicker(heartbeatPoll(r.o.heartbeat))
	defer t.Stop()
	holder := false
	mine := sessionHash(r.session)
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		if !holder {
			holder = r.host.tryHeartbeatRole()
		}
		rec, ok := r.host.readHeartbeat()
		if ok && rec.taken && rec.session == mine {
			err := fmt.Errorf("snapid: %w: another process of this host was told so by the registry", ErrNameTaken)
			r.lost.Store(&err)
			r.log.Error("snapid: node name taken over by another owner; no more ids will be issued", "name", r.name, "err", err)
			return
		}
		due := r.o.heartbeat
		if !holder {
			due += r.o.heartbeat / 2
		}
		if ok && rec.session == mine {
			age := r.o.now().Sub(time.Unix(0, rec.last))
			if age >= 0 && age < due {
				continue
			}
		}
		if r.touch() {
			return
		}
	}
}

// touch refreshes last-seen once and records the answer for the host's
// other processes; it reports whether the name was lost.
func (r *reservation) touch() (lost bool) {
	ctx, cancel := context.WithTimeout(r.ctx, r.o.timeout)
	err := r.reg.Touch(ctx, r.name, r.host.owner, r.session)
	cancel()
	switch {
	case errors.Is(err, ErrNameTaken):
		r.lost.Store(&err)
		r.log.Error("snapid: node name taken over by another owner; no more ids will be issued", "name", r.name, "err", err)
		if werr := r.host.writeHeartbeat(heartbeatRecord{session: sessionHash(r.session), last: r.o.now().UnixNano(), taken: true}); werr != nil {
			r.log.Warn("snapid: the host's other processes could not be told", "name", r.name, "err", werr)
		}
		return true
	case err != nil && r.ctx.Err() == nil:
		r.heartbeatLog.failed(err, "name", r.name)
	case err == nil:
		r.heartbeatLog.succeeded("name", r.name)
		if werr := r.host.writeHeartbeat(heartbeatRecord{session: sessionHash(r.session), last: r.o.now().UnixNano()}); werr != nil {
			r.heartbeatLog.failed(werr, "name", r.name)
		}
	}
	return false
}

// lastHostHeartbeat returns when the host's heartbeat last reached the
// registry for this process's claim, or the zero time.
func (r *reservation) lastHostHeartbeat() time.Time {
	rec, ok := r.host.readHeartbeat()
	if !ok || rec.taken || rec.session != sessionHash(r.session) || rec.last <= 0 {
		return time.Time{}
	}
	return time.Unix(0, rec.last)
}
