package claim

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/snapid/snapid/internal/ctxsync"
	"github.com/snapid/snapid/internal/errs"
	"github.com/snapid/snapid/internal/idform"
	"github.com/snapid/snapid/internal/retry"
	"github.com/snapid/snapid/registry"
)

// Claims, sessions and the mark on a host (files: files.go).
//
// Every process using a name with a registry holds a shared flock on
// <counter>.presence; start-up and close take an exclusive flock on
// <counter>.owner (the gate), so "I am the first" (enter) and "I am the
// last" (close) are decided without races.
//
// The host's first process claims the name (claim): Registry.Claim covers
// the counter as it is (Claim.Floor) and writes a fresh random session
// into the row (Holder.Session); the process records it in
// <counter>.session with the name and owner token, raises the counter to
// the registry's mark (and WithTakeover's floor), writes the mark file and
// extends the mark a step. The host's other processes do not claim again,
// which would replace the session the running ones hold: they join (join,
// verifyJoin), refusing another name than the session file's
// (errs.ErrNameMismatch) or a file of another format or owner token
// (errs.ErrCorruptSession). Extensions, heartbeats (heartbeatloop.go) and the
// return of the reservation are conditional on the session, so a copy of
// the counter directory (same owner token) that claims the name later, on
// this machine or another, supersedes the original: the original's next
// extension fails, it stops at its mark, and the copy starts above it.
//
// <counter>.mark holds the host's mark and a floor (Mark). The
// registry is always written before it, so it never exceeds the
// registry's mark for the session:
//
//   - every counter update checks that its numbers stay at or below the
//     mark (Check); past half a step a background extension starts
//     (extendInBackground); at the mark the caller waits for a synchronous
//     one (the engine's Generator.take, through Extend), and fails with
//     errs.ErrReservationExhausted if the registry cannot be reached;
//   - an extension (Extend) moves the registry's mark old → new,
//     conditional on owner, session and old mark, to a step above the
//     counter, then the mark file (adopt); a step is the greater of
//     WithReserveStep and what the host issued in the last
//     WithOutageHorizon, at most MaxStepGrowth times the step before
//     (nextStep), so that an outage of about half the horizon does not
//     stop issuance at a steady rate and a crash leaves a gap of at most
//     a step;
//   - every update records the counter's new value as the mark file's
//     floor before it writes the counter (Commit; an update whose floor
//     cannot be recorded fails); a counter found below that floor, or
//     below the highest value the process saw, was rolled back while in
//     use and is raised before anything is issued;
//   - the last process out (close) reads the registry's mark and sets it
//     back to the counter (to the floor if the counter went backwards),
//     then the mark file, so a clean restart leaves no gap; it lets its
//     presence lock go before the gate, so that a process starting
//     meanwhile cannot take the closing one for a running one.
//
// A counter restored together with its mark file (a whole directory)
// while processes of the host run is raised by any process that saw a
// later value, and by the host's record of the name when it went below
// the record's floor (the engine's hostrecord.go); one that went back less, read first
// by a process started after the restore, is trusted until the next
// first process's claim raises it to the registry's mark.

// Reservation is a Generator's side of the registry: the claim
// made at Open, the reserved-up-to mark that bounds issuance, the
// background extension of that mark and the heartbeat, and the return of
// the unused reservation by the last process out.
//
// The invariant it keeps: the host's mark file never holds a value above
// the registry's mark for this owner, and no number above the mark file is
// issued. The registry is always written first, the mark file second.
type Reservation struct {
	reg      registry.Registry
	name     string
	host     *Files
	o        Options
	log      *slog.Logger
	withFile func(ctx context.Context, fn func(c Counter) error) error // Config.WithCounter
	cfg      Config

	session  string // the session of the host's claim (Holder.Session)
	seen     Mark   // the mark file as Check read it, for Commit (under the counter lock)
	maxFloor uint64 // the highest floor this process saw or wrote (under the counter lock)

	extendMu  ctxsync.Mutex // one extension at a time in this process
	rates     []rateSample  // the counter when extensions were sized, oldest first (under extendMu)
	curStep   atomic.Uint64
	extending atomic.Bool // a background extension is running
	touching  atomic.Bool // a heartbeat refresh of this process is in flight
	hbHolder  atomic.Bool // the heartbeat loop holds the host's heartbeat role (for the simulator)
	hbDone    atomic.Bool // the heartbeat loop has returned (for the simulator)
	lost      atomic.Pointer[error]

	extendLog    *failureLog // background extensions failing, then working again
	heartbeatLog *failureLog

	bgMu     sync.Mutex // guards stopping and wg.Add against close's wg.Wait
	stopping bool
	closed   bool // set by close under extendMu: no extension after the set-back

	ctx    context.Context // cancelled at close; parent of background calls
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NeedMarkError is returned by Check when the next number would pass the
// mark: the caller then extends synchronously (Extend) and tries again.
type NeedMarkError struct{ Mark, Next uint64 }

func (e *NeedMarkError) Error() string {
	return fmt.Sprintf("%v: the host's reserved-up-to mark is %d, the next number would be %d", errs.ErrReservationExhausted, e.Mark, e.Next)
}

func (e *NeedMarkError) Unwrap() error { return errs.ErrReservationExhausted }

// Start claims the name (the host's first process) or joins the host's
// claim (the others), and prepares the mark. It runs before the Generator
// issues anything; on error nothing has been issued and the counter is
// unchanged.
func Start(ctx context.Context, cfg Config) (*Reservation, error) {
	hs, err := OpenFiles(cfg.Path, cfg.Files)
	if err != nil {
		return nil, err
	}
	r := &Reservation{reg: cfg.Registry, name: cfg.Name, host: hs, o: cfg.Options, log: cfg.Log, withFile: cfg.WithCounter, cfg: cfg}
	r.extendLog = newFailureLog(r.log, r.o.Clock.Now, "extending the reserved range", "ids keep flowing until the mark")
	r.heartbeatLog = newFailureLog(r.log, r.o.Clock.Now, "heartbeat", "")
	if !r.o.HostSet {
		r.o.Host = LocalHostInfo()
	}
	first, err := r.enter(ctx)
	if err != nil {
		hs.Close()
		return nil, err
	}
	if !first {
		// Outside the gate, so that many processes starting at once do
		// not queue behind each other's registry reads.
		if err := r.verifyJoin(ctx); err != nil {
			r.host.Close()
			return nil, err
		}
	}
	// The claim or join stands: the heartbeat file may be made now.
	if err := hs.EnsureHeartbeat(); err != nil {
		r.host.Close()
		return nil, err
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.wg.Add(1)
	go r.heartbeat()
	return r, nil
}

// enter takes this process's shared presence lock under the gate; the
// first process of the host claims the name first, the others join its
// claim (after checking that the session file records it for this name
// and owner token). It reports whether this process was the first.
//
// A first process whose claim is refused before anything was claimed
// (the name another owner's, a form the host cannot use) leaves the disk
// as it found it: under the gate, as the host's only registry process,
// Config.Unmake removes the host's record of the name and the counter if
// this Open made them and no program uses them, and the files beside the
// counter this Open made go too (Files.RemoveMade; only registry
// processes use them). A claim that may have been made keeps everything:
// the registry's row may name the owner token.
func (r *Reservation) enter(ctx context.Context) (first bool, err error) {
	hs := r.host
	if err := hs.LockGate(ctx); err != nil {
		return false, err
	}
	defer hs.Gate().Unlock()
	first, err = hs.Presence().TryLock()
	if err != nil {
		return false, &errs.FileError{Op: "lock", Path: hs.Presence().Path(), Err: err, Counter: hs.counterPath}
	}
	if first {
		if claimed, err := r.claim(ctx); err != nil {
			if !claimed {
				if r.cfg.Unmake != nil {
					r.cfg.Unmake(ctx)
				}
				hs.RemoveMade(r.log)
			}
			hs.Presence().Unlock()
			return false, err
		}
		// Another process can only join through the gate we hold, so the
		// non-atomic change from exclusive to shared is safe.
		hs.Presence().Unlock()
	} else if err := r.join(); err != nil {
		return false, err
	}
	ok, err := hs.Presence().TryRLockContext(ctx, 5*time.Millisecond)
	if err == nil && !ok {
		err = ctx.Err()
	}
	if err != nil {
		return false, &errs.FileError{Op: "lock", Path: hs.Presence().Path(), Err: err, Counter: hs.counterPath}
	}
	return first, nil
}

// claim claims the name for the first process of the host: it raises the
// counter to the registry's mark, records the claim's session and the mark
// beside the counter, and reserves the first step. The other processes of
// the host do not claim again (that would replace the session the running
// ones hold): they join it (see verifyJoin). On error, claimed reports
// whether the registry may hold a claim of this owner: false when it
// failed before the registry was asked, or the registry refused the claim.
func (r *Reservation) claim(ctx context.Context) (claimed bool, err error) {
	// A name released on this host was refused before (the engine's withRecord)
	// unless claimed again on purpose.
	if err := r.oneNamePerCounter(ctx, r.cfg.Released); err != nil {
		return false, err
	}
	if r.cfg.Precheck != nil {
		if err := r.cfg.Precheck(ctx); err != nil {
			return false, err
		}
	}
	// The claim covers what the counter already holds (numbers a
	// standalone host handed out before it joined the registry), in the
	// same atomic change: an Open failing after the claim leaves no mark
	// below them.
	var counted uint64
	if err := r.withFile(ctx, func(c Counter) (err error) { counted, err = c.Load(); return err }); err != nil {
		return false, err
	}
	// A counter that never claimed this name (no session file, or one of
	// another name) starts at the name's mark on the planned path: the
	// name was released by its previous holder (a hand-over) or never
	// used. Raising it then is no alarm; raising a counter that did claim
	// the name, or in a take-over, is.
	prev, perr := r.host.ReadSession()
	firstClaim := !r.o.Takeover && (errors.Is(perr, fs.ErrNotExist) || (perr == nil && prev.Name != r.name))
	var h registry.Holder
	var sent time.Time // when the claim that stood was sent: it refreshed last-seen then
	err = r.retry(ctx, "claim", func(ctx context.Context) (err error) {
		sent = r.o.Clock.Now()
		h, err = r.reg.Claim(ctx, registry.Claim{
			Name: r.name, Owner: r.host.Owner(),
			Hostname: r.o.Host.Hostname, Address: r.o.Host.Address, MachineID: r.o.Host.MachineID,
			Force: r.o.Takeover, Floor: max(r.o.Floor, counted), CloneWindow: r.o.CloneWindow,
		})
		return err
	})
	if err != nil {
		return !refusedClaim(err), err
	}
	if r.cfg.Claimed != nil {
		if err := r.cfg.Claimed(ctx, r.host.Owner(), h); err != nil {
			return true, err
		}
	}
	r.session = h.Session
	if err := r.host.WriteSession(r.name, h.Session); err != nil {
		return true, err
	}
	// The claim refreshed last-seen: the host's heartbeat is not due for
	// an interval, and the host's other processes join without a
	// registry read meanwhile.
	at := sent.UnixNano()
	if err := r.host.EnsureHeartbeat(); err != nil {
		return true, err
	}
	if err := r.host.WriteHeartbeat(Heartbeat{Session: SessionHash(h.Session), Last: at, Tried: at}); err != nil {
		return true, err
	}
	target := max(h.Reserved, r.o.Floor)
	err = r.withFile(ctx, func(c Counter) error {
		cur, err := c.Load()
		if err != nil {
			return err
		}
		if cur < target {
			if err := c.Store(target); err != nil {
				return err
			}
			if firstClaim {
				r.log.Info("snapid: first claim of the name with this counter: it starts at the name's mark in the registry",
					"name", r.name, "path", c.Path(), "from", cur, "to", target)
			} else {
				r.log.Warn("snapid: counter raised to the registry's reserved mark (after a crash, a restore or a take-over)",
					"path", c.Path(), "from", cur, "to", target)
			}
		}
		return r.host.WriteMark(Mark{Mark: h.Reserved, Floor: max(cur, target)})
	})
	if err != nil {
		return true, err
	}
	return true, r.retry(ctx, "extend", func(ctx context.Context) error { return r.Extend(ctx, 0) })
}

// refusedClaim reports whether err is the registry refusing the claim,
// which then holds nothing of this owner: the name another owner's, or a
// claim the registry cannot take. Anything else (a registry not
// answering, an answer lost) may have been a claim that stood.
func refusedClaim(err error) bool {
	for _, refusal := range []error{registry.ErrNameTaken, registry.ErrProbableClone, registry.ErrInvalidName, registry.ErrInvalidOption} {
		if errors.Is(err, refusal) {
			return true
		}
	}
	return false
}

// oneNamePerCounter refuses, before anything is written, a claim of a
// second name on a counter whose session file records another name that
// this counter's owner still holds, active, in the registry (one
// counter, one name): the two rows would share one owner token, and each
// name's processes would refuse the other's session. A name the host
// released (released names it), or that is no longer this owner's, may be
// followed by another.
func (r *Reservation) oneNamePerCounter(ctx context.Context, released string) error {
	s, err := r.host.ReadSession()
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil // never claimed
	case errors.Is(err, errs.ErrCorruptSession):
		return nil // an old or damaged file names nothing; the claim replaces it
	case err != nil:
		return err
	case s.Name == r.name || s.Name == released:
		return nil
	}
	var h registry.Holder
	err = r.retry(ctx, "get", func(ctx context.Context) (err error) { h, err = r.reg.Get(ctx, s.Name); return err })
	switch {
	case errors.Is(err, registry.ErrNotRegistered):
		return nil
	case err != nil:
		return fmt.Errorf("snapid: checking that the counter %s no longer holds %q before claiming %q: %w",
			strings.TrimSuffix(r.host.SessionPath(), SessionSuffix), s.Name, r.name, err)
	case h.State != registry.StateActive || h.Owner != r.host.Owner():
		return nil
	}
	return fmt.Errorf("snapid: %w: the counter %s holds the name %q in the registry (its session file records it); one counter file serves one name: "+
		"release %q first (snapctl release), or give %q its own counter file; nothing was changed",
		errs.ErrNameMismatch, strings.TrimSuffix(r.host.SessionPath(), SessionSuffix), s.Name, s.Name, r.name)
}

// join reads the host's claim from the session file, for a process that
// is not the first of its host; the caller holds the gate. The claim must
// be for this name and this counter's owner token: a process must not
// issue under a name its host did not claim, registry or not.
func (r *Reservation) join() error {
	s, err := r.host.ReadSession()
	if err != nil {
		return err
	}
	switch {
	case s.Owner != r.host.Owner():
		return &errs.FileError{Op: "read", Path: r.host.SessionPath(), Counter: r.host.counterPath, Err: fmt.Errorf(
			"%w: it records a claim of owner token %s, not of this counter's (%s); was the owner file replaced while processes of this host use the counter?",
			errs.ErrCorruptSession, registry.OwnerID(s.Owner), registry.OwnerID(r.host.Owner()))}
	case s.Name != r.name:
		return fmt.Errorf("snapid: %w: the counter %s is in use by this host under the name %q, not %q: one counter file serves one name; open it as %q, or give %q its own counter file",
			errs.ErrNameMismatch, strings.TrimSuffix(r.host.SessionPath(), SessionSuffix), s.Name, r.name, s.Name, r.name)
	}
	r.session = s.Session
	if r.cfg.Joined != nil {
		return r.cfg.Joined()
	}
	return nil
}

// check is called under the counter lock before a counter update of k
// numbers from cur; it returns the value to count from. It refuses numbers
// above the mark and starts an extension when half of the step is used.
//
// A counter that went backwards while the host uses it (restored from a
// backup or copied over in place) is raised to the floor in the mark file,
// the value the last update of any process of the host wrote, or to high,
// the highest value this process saw: every number the host issued is at
// or below the greater of the two.
func (r *Reservation) Check(cur, k uint64, decimal bool, high uint64) (uint64, error) {
	if errp := r.lost.Load(); errp != nil {
		return 0, *errp
	}
	m, err := r.host.ReadMark()
	if err != nil {
		return 0, err
	}
	r.seen = m
	// maxFloor: a mark file restored together with the counter (a whole
	// directory) reads an old floor; this process still knows a newer one.
	r.maxFloor = max(r.maxFloor, m.Floor)
	base := max(cur, r.maxFloor, high)
	if base > cur {
		r.log.Warn("snapid: the counter went backwards while in use (restored or copied over?); raising it",
			"name", r.name, "counter", cur, "to", base)
	}
	span, ok := idform.Span(base, k, decimal)
	if !ok {
		// No mark can make room past 2^64-1: advance refuses it with
		// errs.ErrExhausted, and the registry and the mark file are not touched.
		return base, nil
	}
	if base+span > m.Mark {
		return 0, &NeedMarkError{Mark: m.Mark, Next: base + span}
	}
	if m.Mark-(base+span) < r.Step()/2 {
		r.extendInBackground()
	}
	return base, nil
}

// Commit records v, the value the counter update is about to write, as
// the floor in the mark file, so that every process of the host, new ones
// included, finds a counter rolled back below it. It runs under the
// counter lock, after Check and before the counter is written: an update
// whose floor cannot be recorded fails, and hands out nothing (a counter
// whose write then fails is below its floor: the next update raises it,
// a gap).
func (r *Reservation) Commit(v uint64) error {
	if err := r.host.WriteMark(Mark{Mark: r.seen.Mark, Floor: v}); err != nil {
		return fmt.Errorf("snapid: recording the counter's floor beside it: %w", err)
	}
	r.maxFloor = max(r.maxFloor, v)
	return nil
}

// MaxStepGrowth bounds how much larger than the current step the next one
// may be: a steady high rate reaches its horizon's worth within a few
// extensions, while a short burst cannot make the step (and so the gap a
// crash leaves) much larger than what the host issued recently.
const MaxStepGrowth = 16

// maxRateSamples bounds the samples kept; dropping the oldest shortens
// the window measured, which only makes the step smaller.
const maxRateSamples = 64

// adopt raises the mark file to v, which the registry holds for this
// host's session, and its floor to the counter value seen before v was
// reserved.
func (r *Reservation) adopt(ctx context.Context, v, floor uint64) error {
	return r.withFile(ctx, func(c Counter) error {
		m, err := r.host.ReadMark()
		if err != nil || m.Mark >= v {
			return err
		}
		return r.host.WriteMark(Mark{Mark: v, Floor: max(m.Floor, floor)})
	})
}

// close stops the background work and, if this is the last process on the
// host using the name, returns the unused reservation: the registry's mark
// is set back to the counter's value, then the mark file.
func (r *Reservation) Close() error {
	r.bgMu.Lock()
	r.stopping = true
	r.bgMu.Unlock()
	r.cancel()
	r.wg.Wait()
	// Another process takes the heartbeat now, not once this one has
	// waited for the gate and returned its reservation.
	r.host.DropHeartbeatRole()
	// A synchronous extension a caller was waiting for has been cancelled;
	// let it finish before deciding what to set back, and start none.
	r.extendMu.Lock()
	defer r.extendMu.Unlock()
	r.closed = true
	ctx, cancel := r.o.Clock.WithTimeout(context.Background(), r.o.Timeout)
	defer cancel()
	if err := r.host.LockGate(ctx); err != nil {
		return err
	}
	defer r.host.Gate().Unlock()
	// Every presence lock of this process is gone before the gate is.
	defer r.host.Presence().Unlock()
	r.host.Presence().Unlock()
	last, err := r.host.Presence().TryLock()
	if err != nil || !last || r.lost.Load() != nil {
		return err
	}
	if r.cfg.Closing != nil {
		// With a registry timeout of its own: another user who may read
		// a lease file can hold its lock as long as it likes, and the
		// return of the reservation below must not pay for it.
		cctx, ccancel := r.o.Clock.WithTimeout(context.Background(), r.o.Timeout)
		r.cfg.Closing(cctx, r.session)
		ccancel()
		ctx, cancel = r.o.Clock.WithTimeout(context.Background(), r.o.Timeout)
		defer cancel()
	}
	// The value to set back to: the counter, or, if it went backwards
	// while in use, the floor or the highest value this process saw
	// (raised in the file first, so a restart finds it).
	var v uint64
	err = r.withFile(ctx, func(c Counter) error {
		cur, err := c.Load()
		if err != nil {
			return err
		}
		m, err := r.host.ReadMark()
		if err != nil {
			return err
		}
		if v = max(cur, m.Floor, c.High()); v > cur {
			return c.Store(v)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The registry's mark, not the mark file's, is set back: an extension
	// whose caller gave up may still have been applied.
	h, err := r.reg.Get(ctx, r.name)
	if err != nil {
		return fmt.Errorf("snapid: returning the unused reservation of %q: %w", r.name, err)
	}
	if h.Owner != r.host.Owner() || h.Session != r.session || h.State != registry.StateActive || h.Reserved <= v {
		return nil
	}
	m := h.Reserved
	if _, err := r.reg.Extend(ctx, r.name, r.host.Owner(), r.session, m, v); err != nil {
		return fmt.Errorf("snapid: returning the unused reservation of %q (%d..%d): %w", r.name, v+1, m, err)
	}
	return r.withFile(ctx, func(c Counter) error { return r.host.WriteMark(Mark{Mark: v, Floor: v}) })
}

// retry is retry.Do with the claim's logger and waits.
func (r *Reservation) retry(ctx context.Context, op string, call func(context.Context) error) error {
	return retry.Do(ctx, r.o.Clock, r.log, r.o.RetryWait, op, call)
}

// Files returns the claim's files beside the counter.
func (r *Reservation) Files() *Files { return r.host }

// Registry returns the registry the name is claimed in.
func (r *Reservation) Registry() registry.Registry { return r.reg }

// Options returns the claim's settings.
func (r *Reservation) Options() Options { return r.o }

// Session returns the session of the host's claim.
func (r *Reservation) Session() string { return r.session }

// Context returns the context of the claim's background work: it ends at
// Close (and Abandon).
func (r *Reservation) Context() context.Context { return r.ctx }

// Lost returns why the process stopped issuing under the name
// (ErrNameTaken: another owner holds it now), or nil.
func (r *Reservation) Lost() error {
	if errp := r.lost.Load(); errp != nil {
		return *errp
	}
	return nil
}

// Extending reports whether a background extension is running.
func (r *Reservation) Extending() bool { return r.extending.Load() }

// Touching reports whether a heartbeat refresh of this process is in
// flight.
func (r *Reservation) Touching() bool { return r.touching.Load() }

// HeartbeatHolder reports whether the heartbeat loop holds the host's
// heartbeat role; HeartbeatDone, whether the loop has returned.
func (r *Reservation) HeartbeatHolder() bool { return r.hbHolder.Load() }

// HeartbeatDone reports whether the heartbeat loop has returned.
func (r *Reservation) HeartbeatDone() bool { return r.hbDone.Load() }

// Abandon stops the background work and closes the claim's files as a
// killed process would: nothing is returned to the registry, and the
// presence lock goes with the files.
func (r *Reservation) Abandon() error {
	r.cancel()
	r.wg.Wait()
	return r.host.Close()
}
