package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
)

// What the simulator watches of the hosts' heartbeats, now that their
// clocks run it (hostclock.go): the events it reaches and the checks of
// what the heartbeat guarantees (docs/guarantees.md):
//
//   - a live host's last-seen stays fresh: while a host's processes run
//     under the registry's current session of its name and the host can
//     reach the registry (no outage, its data centre not cut off, its
//     heartbeat holder or else every other process reaching it), the row's
//     last-seen is at most an interval and seven eighths plus the registry
//     timeout old (freshLimit): so a live host's name is never taken as
//     stale by a claim of its owner token from another machine (the clone
//     window is longer);
//   - once a host's heartbeat record says the name was taken, and the
//     host has run a poll's time since, no process of that session hands
//     out another id;
//   - a process joining its host's claim (other processes of the host
//     run) is refused while the record says the name was taken, and,
//     unless the record shows a refresh of the claim less than an interval
//     ago by the host's clock, it is refused when the registry (reachable)
//     shows the claim no longer stands: another owner, another session, not
//     active.

// hostHeartbeat is what the simulator knows of one host's heartbeat.
type hostHeartbeat struct {
	holder   *engine.Generator // the last process seen holding the role
	down     [3]atomic.Bool    // the registry is unreachable for that process slot
	ran      time.Duration     // host time its clock ran through (timers firing), not jumped
	liveFrom time.Time         // true time since which the host has held its name reachably (zero: not now)
	asleep   time.Time         // true time until which the host's machine is suspended
	taken    uint64            // sessionHash of a session the record says was taken (0: none seen)
	takenRan time.Duration     // ran when it was first seen
	// toldSession, toldRan: the session of a process of the host the
	// registry told its name is another owner's, and ran when the
	// simulator first saw it: every process of that session stops within
	// a poll, whether or not the record says so.
	toldSession string
	toldRan     time.Duration
	learned     map[*engine.Generator]bool
	// rmOnTaken: an operator removes the host's heartbeat file the
	// moment its record first says "taken" (within one clock step,
	// KClock with Arg "rm-heartbeat"), before the other processes poll.
	rmOnTaken bool
	removed   int // heartbeat files removed so
	// regFaults is how many injected registry faults had fired when the
	// host was last looked at: one that fired since may have failed a
	// refresh of its holder, whose next try then comes after a back-off.
	regFaults int
}

// sessionHash is the library's hash of a session in the heartbeat record
// (FNV-1a, 64 bits).
func sessionHash(session string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(session))
	return h.Sum64()
}

// hbRecord is the heartbeat record as the library writes it (see
// heartbeat.go in package internal/engine): magic, session hash, last, tried,
// state (bit 0: taken).
type hbRecord struct {
	session uint64
	last    int64
	taken   bool
	ok      bool
}

func readHBRecord(ho *host) hbRecord {
	b, err := os.ReadFile(ho.counter + ".heartbeat")
	if err != nil || len(b) != 40 || string(b[:8]) != "snaphb02" {
		return hbRecord{}
	}
	st := binary.LittleEndian.Uint64(b[32:])
	return hbRecord{
		session: binary.LittleEndian.Uint64(b[8:]),
		last:    int64(binary.LittleEndian.Uint64(b[16:])),
		taken:   st&1 != 0,
		ok:      true,
	}
}

// fresh reports whether rec shows a refresh of session less than an
// interval ago at now (the library's freshClaim).
func (rec hbRecord) fresh(session string, now time.Time) bool {
	if !rec.ok || rec.taken || rec.session != sessionHash(session) || rec.last <= 0 {
		return false
	}
	d := now.Sub(time.Unix(0, rec.last))
	return d >= 0 && d < hbInterval
}

// suspended notes that ho's machine does not run until the true time
// until (its clock jumped): its last-seen may rightly be old.
func (w *world) suspended(ho *host, until time.Time) {
	ho.hb.liveFrom = time.Time{}
	if until.After(ho.hb.asleep) {
		ho.hb.asleep = until
	}
}

// watchHeartbeats looks at every host after its clock moved or a step
// ran: the events reached, and the checks above.
func (w *world) watchHeartbeats() {
	var lo, hi time.Duration
	first := true
	for _, ho := range w.hosts {
		if !w.running(ho) {
			ho.hb.liveFrom = time.Time{}
			continue
		}
		if ho.clk != nil {
			sk := w.skew(ho)
			if first || sk < lo {
				lo = sk
			}
			if first || sk > hi {
				hi = sk
			}
			first = false
		}
		if !ho.cfg.Registry {
			continue
		}
		w.watchHost(ho)
	}
	if !first && hi-lo > skewLimit {
		w.reached["clock-skew"]++
	}
	if n := int(w.regs[0].touched.Load() + w.regs[1].touched.Load()); n > 0 {
		w.reached["heartbeat-refresh"] = n
	}
}

// watchFired is watchHeartbeats after a firing on ho's clock: only ho
// can have changed.
func (w *world) watchFired(ho *host) {
	if ho.cfg.Registry && w.running(ho) {
		w.watchHost(ho)
	}
}

// watchHost looks at one registered host whose processes run: which
// process holds the heartbeat role, what its processes learned of their
// name, what its record says, and whether its last-seen stays fresh.
func (w *world) watchHost(ho *host) {
	procs := w.scanProcs(ho)
	if procs.holder != nil {
		w.noteHolder(ho, procs.holder)
	}
	// The record says "taken" only once a process of the host was told
	// (it stops first, then writes the record).
	if procs.lost {
		w.noteTaken(ho)
	}
	w.checkLastSeen(ho, procs)
}

// procScan is what watchHost saw of a host's processes.
type procScan struct {
	holder     *engine.Generator // the process holding the heartbeat role (nil: none)
	sessions   map[string]bool   // the sessions of the processes running with their name
	running    int               // processes running with their name
	down       int               // of those, the ones cut off from the registry
	holderDown bool              // the holder is one of them
	lost       bool              // a process lost its name
}

// scanProcs looks at each open process of ho in turn: it notes a process
// the registry told its name is another owner's and one that learned so
// from its host, and counts the processes running and cut off.
func (w *world) scanProcs(ho *host) procScan {
	scan := procScan{sessions: map[string]bool{}}
	for p, g := range ho.procs {
		if g == nil {
			continue
		}
		st := engine.HeartbeatOf(g)
		if st.Holder {
			scan.holder = g
		}
		w.noteTold(ho, p, st)
		scan.lost = scan.lost || st.Lost != nil
		w.noteLearned(ho, g, st)
		if st.Running && st.Lost == nil {
			scan.sessions[st.Session] = true
			scan.running++
			if ho.hb.down[p].Load() {
				scan.down++
				scan.holderDown = scan.holderDown || st.Holder
			}
		}
	}
	return scan
}

// noteTold records the session of process p of ho, with the host's
// running time, once the registry told the process its name is another
// owner's.
func (w *world) noteTold(ho *host, p int, st engine.HeartbeatState) {
	e := ho.exts[p]
	if e == nil || e.told.Load() == 0 || ho.hb.toldSession == st.Session {
		return
	}
	// Unless the told process could not write the host's record
	// (a fault on the write, or it was stopped inside an
	// operation): then the others learn only from the registry,
	// which may be out of reach.
	if rec := readHBRecord(ho); rec.ok && rec.taken && rec.session == sessionHash(st.Session) ||
		!ho.disk.hbFailed.Load() && !ho.disk.freeze.hasFired() {
		ho.hb.toldSession, ho.hb.toldRan = st.Session, ho.hb.ran
	}
}

// noteLearned counts a process of ho that learned from its host's
// heartbeat record that its name was taken, once per process.
func (w *world) noteLearned(ho *host, g *engine.Generator, st engine.HeartbeatState) {
	if st.Lost == nil || !strings.Contains(st.Lost.Error(), "another process of this host was told so") || ho.hb.learned[g] {
		return
	}
	if ho.hb.learned == nil {
		ho.hb.learned = map[*engine.Generator]bool{}
	}
	ho.hb.learned[g] = true
	w.reached["taken-propagated"]++
}

// noteHolder records holder as the process of ho holding the heartbeat
// role, and counts a handover from another process.
func (w *world) noteHolder(ho *host, holder *engine.Generator) {
	if ho.hb.holder != nil && ho.hb.holder != holder {
		w.reached["heartbeat-handover"]++
	}
	ho.hb.holder = holder
}

// noteTaken records a session that ho's heartbeat record newly says was
// taken, with the host's running time, and removes the record's file then
// if an operator was set to.
func (w *world) noteTaken(ho *host) {
	rec := readHBRecord(ho)
	if !rec.ok || !rec.taken || ho.hb.taken == rec.session {
		return
	}
	ho.hb.taken, ho.hb.takenRan = rec.session, ho.hb.ran
	if !ho.hb.rmOnTaken {
		return
	}
	// The processes that have the file open carry the
	// record into the one the first of them makes again.
	if os.Remove(ho.counter+".heartbeat") == nil {
		ho.hb.removed++
		w.reached["heartbeat-removed-when-taken"]++
	}
	_ = ho.disk.settle()
}

// checkLastSeen checks that a live host's last-seen stays fresh: while
// ho holds its name and can reach the registry, the row's last-seen is
// at most freshLimit old.
func (w *world) checkLastSeen(ho *host, procs procScan) {
	row, ok := w.reg0.Row(ho.cfg.Name)
	reachable := w.hostReachable(ho, procs)
	// (A session is made by one claim of one owner: a running process
	// under the row's session holds the name.)
	holding := ok && row.State == registry.StateActive && procs.sessions[row.Session]
	now := w.clock.now()
	switch {
	case !holding || !reachable || now.Before(ho.hb.asleep):
		ho.hb.liveFrom = time.Time{}
	case ho.hb.liveFrom.IsZero():
		ho.hb.liveFrom = now
	default:
		since := ho.hb.liveFrom
		if row.LastSeen.After(since) {
			since = row.LastSeen
		}
		if age := now.Sub(since); age > freshLimit {
			w.check.violation("h%d runs under %s's current session and can reach the registry, but the registry last saw it %v ago (last-seen %v, reachable since %v): more than the heartbeat allows (%v); a claim of its owner token from another machine would take the live host's name after the clone window",
				ho.i, ho.cfg.Name, age, row.LastSeen.Format(time.TimeOnly), ho.hb.liveFrom.Format(time.TimeOnly), freshLimit)
			ho.hb.liveFrom = now // once per stretch
		}
	}
}

// hostReachable reports whether ho's heartbeat can surely reach the
// registry: no outage, its data centre not cut off, its holder or else
// every other process reaching it, no random faults, nothing frozen, and
// no injected fault fired since it was last looked at (which it notes).
func (w *world) hostReachable(ho *host, procs procScan) bool {
	reachable := !w.down && !w.cut[ho.cfg.DC] && (procs.down == 0 || procs.down == 1 && procs.holderDown && procs.running >= 2)
	if w.h.Cassandra && w.h.CQLFaults > 0 {
		reachable = false // random timeouts: the registry may fail any refresh
	}
	if ho.disk.freeze.hasFired() {
		reachable = false // frozen by a fault inside an operation (freeze.go): its processes are dead, abandoned at the step's end
	}
	if n := w.reg.fault.count(); n != ho.hb.regFaults {
		// An injected fault fired (on any host's call): it may have
		// failed this host's refresh, which the heartbeat then retries
		// after a back-off; the stretch starts again.
		ho.hb.regFaults = n
		reachable = false
	}
	return reachable
}

// issuedAfterTaken checks that process p of ho, which just handed out
// numbers, had not been told by its host's heartbeat record, a poll's
// time ago or more, that its name was taken.
func (c *checker) issuedAfterTaken(ho *host, p int) {
	g := ho.procs[p]
	if g == nil || c.w.parallel {
		return
	}
	// A process the registry told itself stops at once (it marks its
	// name lost before it tells the others through the record).
	if e := ho.exts[p]; e != nil {
		if told := e.told.Load(); told != 0 && int(told-1) < c.w.step {
			c.violation("h%d/p%d handed out a number at step %d, after the registry told it at step %d that its name %s was another owner's: it stops at once",
				ho.i, p, c.w.step, told-1, ho.cfg.Name)
		}
	}
	st := engine.HeartbeatOf(g)
	if ho.hb.toldSession != "" && st.Session == ho.hb.toldSession && ho.hb.ran-ho.hb.toldRan > hbPoll {
		c.violation("h%d/p%d handed out a number %v (of its host's running time) after another process of its host was told by the registry that its name %s was another owner's: every process stops at its next poll (%v)",
			ho.i, p, ho.hb.ran-ho.hb.toldRan, ho.cfg.Name, hbPoll)
	}
	if ho.hb.taken == 0 {
		return
	}
	if sessionHash(st.Session) == ho.hb.taken && ho.hb.ran-ho.hb.takenRan > hbPoll {
		c.violation("h%d/p%d handed out a number %v (of its host's running time) after the host's heartbeat record said its name %s was taken: every process stops at its next poll (%v)",
			ho.i, p, ho.hb.ran-ho.hb.takenRan, ho.cfg.Name, hbPoll)
	}
}

// joinState is what the simulator saw of a registered host just before
// one of its processes opened.
type joinState struct {
	join      bool // other processes of the host run: the Open joins their claim
	rec       hbRecord
	hostNow   time.Time
	row       registry.Holder
	rowOK     bool
	reachable bool
}

func (w *world) beforeOpen(ho *host) joinState {
	if !ho.cfg.Registry || !w.running(ho) {
		return joinState{}
	}
	row, ok := w.reg0.Row(ho.cfg.Name)
	return joinState{
		join: true, rec: readHBRecord(ho), hostNow: w.hostClock(ho).Now(), row: row, rowOK: ok,
		reachable: !w.down && !w.cut[ho.cfg.DC] && !ho.hb.down[0].Load() && !ho.hb.down[1].Load() && !ho.hb.down[2].Load() &&
			!w.reg.fault.pending() && !(w.h.Cassandra && w.h.CQLFaults > 0),
	}
}

// afterOpen checks a join (see above) and counts a join refused because
// the record says the name was taken.
func (w *world) afterOpen(ho *host, p int, g *engine.Generator, err error, pre joinState, ext *extensions) {
	if err == nil {
		ext.g.Store(g)
	}
	if err != nil && strings.Contains(err.Error(), "the registry told another process of this host") {
		w.reached["taken-propagated"]++
	}
	if err != nil || !pre.join || w.parallel || ho.disk.freeze.hasFired() {
		return // (a process frozen by a fault inside an operation reads no record: it is dead, abandoned at the step's end)
	}
	st := engine.HeartbeatOf(g)
	if pre.rec.ok && pre.rec.taken && pre.rec.session == sessionHash(st.Session) {
		w.check.violation("h%d/p%d joined its host's claim of %s although the host's heartbeat record says the name was taken", ho.i, p, ho.cfg.Name)
		return
	}
	if pre.rec.fresh(st.Session, pre.hostNow) || !pre.reachable || !pre.rowOK {
		return
	}
	owner, oerr := admin.OwnerToken(ho.counter)
	if oerr == nil && (pre.row.Owner != owner || pre.row.Session != st.Session || pre.row.State != registry.StateActive) {
		w.check.violation("h%d/p%d joined its host's claim of %s (session %.8s) while the registry's row was %s and the heartbeat record did not show a refresh of the claim within an interval: the claim no longer stood",
			ho.i, p, ho.cfg.Name, st.Session, pre.row)
	}
}

// procRegistry is the registry as one process slot of a host reaches it:
// unreachable (every call fails with ErrRegistry) while the slot is cut
// off (a holder whose own calls fail while the host's other processes
// reach the registry).
type procRegistry struct {
	*faultyRegistry
	down *atomic.Bool
	ext  *extensions
}

// extensions is what one process's extensions showed: the Generator
// (set once its Open returned) and the step of its last extension.
type extensions struct {
	w    *world
	ho   *host
	p    int
	g    atomic.Pointer[engine.Generator]
	mu   sync.Mutex
	last uint64
	// told: one more than the step at which the registry first answered
	// the process's extension or refresh that the name is another
	// owner's (ErrNameTaken); 0: never.
	told atomic.Int64
}

// answered records a registry answer to the process's extension or
// refresh.
func (e *extensions) answered(err error) {
	if errors.Is(err, engine.ErrNameTaken) {
		e.told.CompareAndSwap(0, e.w.stepNow.Load()+1)
	}
}

// extended checks an extension of the process: its step (the library's
// current step, set just before the call) is at most 16 times the step of
// its previous one (the configured step before any): the growth cap that
// bounds the gap a crash leaves after a burst (docs/guarantees.md).
func (e *extensions) extended() {
	g := e.g.Load()
	if g == nil {
		return
	}
	step := engine.ReservationStep(g)
	e.mu.Lock()
	prev := e.last
	e.last = step
	e.mu.Unlock()
	if step > 16*prev && e.w.contract.on() {
		// (From the extension's goroutine: reported with the registry's
		// contract, after the step.)
		e.w.contract.broken("h%d/p%d extended its reservation by a step of %d after one of %d: more than 16 times (the step's growth cap)", e.ho.i, e.p, step, prev)
	}
}

func (r procRegistry) cutOff(op string) error {
	if r.down.Load() {
		return fmt.Errorf("sim: %w: %s: this process cannot reach the registry (connection refused)", engine.ErrRegistry, op)
	}
	return nil
}

func (r procRegistry) Claim(ctx context.Context, c registry.Claim) (registry.Holder, error) {
	if err := r.cutOff("claim"); err != nil {
		return registry.Holder{}, err
	}
	return r.faultyRegistry.Claim(ctx, c)
}

func (r procRegistry) Extend(ctx context.Context, name, owner, session string, old, new uint64) (registry.Holder, error) {
	if err := r.cutOff("extend"); err != nil {
		return registry.Holder{}, err
	}
	r.ext.extended()
	h, err := r.faultyRegistry.Extend(ctx, name, owner, session, old, new)
	r.ext.answered(err)
	return h, err
}

func (r procRegistry) Touch(ctx context.Context, name, owner, session string) error {
	if err := r.cutOff("touch"); err != nil {
		return err
	}
	err := r.faultyRegistry.Touch(ctx, name, owner, session)
	r.ext.answered(err)
	return err
}

func (r procRegistry) Get(ctx context.Context, name string) (registry.Holder, error) {
	if err := r.cutOff("get"); err != nil {
		return registry.Holder{}, err
	}
	return r.faultyRegistry.Get(ctx, name)
}

// procOptions are the options of process slot p of ho: the registry as
// that slot reaches it, and what ext records of its extensions.
func (w *world) procOptions(ho *host, p int, ext *extensions) []engine.Option {
	if !ho.cfg.Registry {
		return nil
	}
	return []engine.Option{engine.WithRegistry(procRegistry{w.regs[ho.cfg.DC], &ho.hb.down[p], ext})}
}

// holderDown cuts the process holding ho's heartbeat role off from the
// registry (down), or lets every process of ho reach it again.
func (w *world) holderDown(ho *host, down bool) {
	if !down {
		for p := range ho.hb.down {
			ho.hb.down[p].Store(false)
		}
		return
	}
	for p, g := range ho.procs {
		if g != nil && engine.HeartbeatOf(g).Holder {
			if !ho.hb.down[p].Swap(true) {
				w.faulted()
			}
			return
		}
	}
}

// pending reports whether a fault is armed and has not fired.
func (a *armed[T]) pending() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.set
}
