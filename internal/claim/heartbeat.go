package claim

import (
	"encoding/binary"
	"hash/fnv"
	"math"
	"time"
)

// The heartbeat record's magic, size and state bits.
const (
	HeartbeatMagic = "snaphb02"
	HeartbeatSize  = 40

	heartbeatTaken = 1 // the registry said the name is another owner's
	heartbeatRetry = 2 // the last try was the holder's, after its own failure
)

// Heartbeat is the content of the heartbeat file.
type Heartbeat struct {
	Session uint64 // SessionHash of the claim's session
	Last    int64  // Unix nanoseconds: when the last refresh that reached the registry was sent
	Tried   int64  // when the last refresh was sent, whatever its answer
	Taken   bool   // the registry said the name is another owner's
	// Retry: the last try was the holder's after a refresh of its own
	// failed. It does not hold the host's other processes back (see
	// HeartbeatDue): a holder whose own calls fail must not keep the
	// others from refreshing.
	Retry bool
}

// SessionHash identifies a session in the record (FNV-1a, 64 bits).
func SessionHash(session string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(session))
	return h.Sum64()
}

// EncodeHeartbeat returns the record's HeartbeatSize bytes.
func EncodeHeartbeat(r Heartbeat) []byte {
	b := make([]byte, HeartbeatSize)
	copy(b, HeartbeatMagic)
	binary.LittleEndian.PutUint64(b[8:], r.Session)
	binary.LittleEndian.PutUint64(b[16:], uint64(r.Last))
	binary.LittleEndian.PutUint64(b[24:], uint64(r.Tried))
	var state uint64
	if r.Taken {
		state |= heartbeatTaken
	}
	if r.Retry {
		state |= heartbeatRetry
	}
	binary.LittleEndian.PutUint64(b[32:], state)
	return b
}

// DecodeHeartbeat returns the record in b; ok is false for anything but a
// whole record this version writes.
func DecodeHeartbeat(b []byte) (r Heartbeat, ok bool) {
	if len(b) != HeartbeatSize || string(b[:8]) != HeartbeatMagic {
		return Heartbeat{}, false
	}
	state := binary.LittleEndian.Uint64(b[32:])
	if state&^(heartbeatTaken|heartbeatRetry) != 0 {
		return Heartbeat{}, false
	}
	return Heartbeat{
		Session: binary.LittleEndian.Uint64(b[8:]),
		Last:    int64(binary.LittleEndian.Uint64(b[16:])),
		Tried:   int64(binary.LittleEndian.Uint64(b[24:])),
		Taken:   state&heartbeatTaken != 0,
		Retry:   state&heartbeatRetry != 0,
	}, true
}

// Poll is how often each process looks at the heartbeat role
// and record.
func Poll(interval time.Duration) time.Duration {
	return max(interval/4, time.Millisecond)
}

// Age is how long ago the Unix-nanosecond time t was by now; a time in
// the future (a clock set back) or none is infinitely old.
func Age(now time.Time, t int64) time.Duration {
	if t <= 0 {
		return math.MaxInt64
	}
	d := now.Sub(time.Unix(0, t))
	if d < 0 {
		return math.MaxInt64
	}
	return d
}

// FreshClaim reports whether the record shows a refresh of this session
// sent less than an interval ago (and not in the future: a clock set back
// makes no record fresh).
func FreshClaim(rec Heartbeat, ok bool, session string, now time.Time, interval time.Duration) bool {
	if !ok || rec.Taken || rec.Session != SessionHash(session) {
		return false
	}
	return Age(now, rec.Last) < interval
}

// HeartbeatDue reports whether a process finding rec at now sends a
// refresh; holder says whether it holds the host's heartbeat role, fails
// how many of its own refreshes failed in a row.
//
// The holder is due at the fourth poll after the last send (half a poll
// of slack for a late tick): one refresh per interval. After its own
// failures it tries again 2, then 4 polls after the last try, never
// further apart (with the cap, a holder alone tries once per interval
// through an outage and refreshes within an interval of its end).
//
// Without the role, a process is due once last-seen is an interval and a
// half old and no try was sent for half an interval (a try that has not
// come back by then is treated as lost: its sender may be stopped
// mid-call). A try the holder made after a failure of its own does not
// count: a holder whose calls fail while the others' would not (its
// connection is broken) would otherwise retry just as the others become
// due, and hold them back half an interval each time. So while the
// holder, or else every other process, can reach the registry, the last
// refresh that reached it was sent at most an interval and seven eighths
// ago (the holder's try sent up to half a poll past the interval, half an
// interval, and a poll to notice), plus a timeout for it to arrive. Not
// covered: the holder and another process both unable to reach it (the
// other's try, not marked, holds the rest back half an interval; marking
// every process's tries after its own failure would let an outage cost a
// try per poll). During an outage the others' tries, half an interval
// apart, keep the holder's back-off from coming due: the host sends about
// two per interval.
func HeartbeatDue(rec Heartbeat, now time.Time, interval time.Duration, holder bool, fails int64) bool {
	poll := Poll(interval)
	if holder {
		gap := poll << min(fails, 2) // after failures: 2, then 4 polls apart
		return Age(now, rec.Last) >= interval-poll/2 && Age(now, rec.Tried) >= gap
	}
	return Age(now, rec.Last) >= interval+interval/2 && (rec.Retry || Age(now, rec.Tried) >= interval/2)
}
