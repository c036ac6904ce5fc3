package sim

import (
	"runtime"
	"time"

	libclock "github.com/snapid/snapid/internal/clock"
	"github.com/snapid/snapid/internal/engine"
)

// One clock per host. The simulator's true time (world.clock) is the
// registry side's: the in-memory registry's and the Cassandra adapter's
// now. Every host runs a clock of its own (hostClock), a fake clock that
// the simulator moves: its reading is the true time plus the host's skew,
// and the timers, sleeps and context deadlines the library arms on it
// (the heartbeat's poll above all) fire when simulated time passes them,
// one at a time, each followed by a wait until the work it woke is done
// (settleHost), so that a serial history replays the same from its seed.
//
// Time moves between steps (stepTime after each), by the clock steps of a
// history (forward: every host runs through the time, its heartbeat
// polling, for up to runFor; what is left passes as if every machine were
// suspended, its wall clock stepped forward and its timers shifted with
// it; back: every clock, the registry's too, steps back), and by a host's
// own clock stepped forward or back alone (skew).

const (
	// hbInterval, cloneWindow and regTimeout are the library's defaults
	// (WithHeartbeat, WithCloneWindow, WithRegistryTimeout), which every
	// registered host of a history runs with.
	hbInterval  = time.Minute
	hbPoll      = hbInterval / 4
	cloneWindow = 5 * time.Minute
	regTimeout  = 15 * time.Second

	// stepTime is the simulated time a step takes: a history of a hundred
	// steps lasts over three heartbeat intervals before any clock step.
	stepTime = 2 * time.Second

	// runFor bounds the time the hosts run through, heartbeat and all, in
	// one move of the clock; past it the rest passes as a suspension
	// (the machines' wall clocks jump, nothing runs): a three-hour step
	// costs 9 polls per process, not 720.
	runFor = 2*hbInterval + hbPoll

	// skewLimit is the clock skew between hosts past which the "clock-skew"
	// event counts: the tolerance docs/guarantees.md states for the clone
	// check (the window less an interval and seven eighths of the
	// heartbeat less the registry timeout: 2 min 52.5 s), beyond which a
	// claimant's clock ahead of a live holder's could take its name.
	skewLimit = cloneWindow - hbInterval*15/8 - regTimeout

	// freshLimit is how old a live host's last-seen may be in the
	// registry while its heartbeat can reach it (heartbeat.go: an
	// interval and seven eighths plus a timeout), plus one step's time
	// for the simulator to look.
	freshLimit = hbInterval*15/8 + regTimeout + stepTime
)

// hostClock is one simulated host's clock (shared by its processes and
// the operator's calls on it).
type hostClock struct {
	*libclock.Fake
}

// Sleep is the fake clock's, except for the pauses of a loop polling a
// kernel lock that another process holds for microseconds (the heartbeat
// record's byte lock): those run on the real clock, so that a process
// waiting for another's update does not wait for simulated time to move.
func (c hostClock) Sleep(d time.Duration) {
	if d < time.Millisecond {
		time.Sleep(d)
		return
	}
	c.Fake.Sleep(d)
}

// hostClock returns ho's clock, made at the true time on first use.
func (w *world) hostClock(ho *host) hostClock {
	if ho.clk == nil {
		ho.clk = libclock.NewFake(w.clock.now())
	}
	return hostClock{ho.clk}
}

// skew is how far ho's clock is ahead of the true time.
func (w *world) skew(ho *host) time.Duration {
	return w.hostClock(ho).Now().Sub(w.clock.now())
}

// passTime moves the true time d (> 0) forward, and with it the clock of
// every host: for up to runFor they run through it, every timer firing in
// time order; the rest passes as a suspension. The hosts in suspend are
// suspended throughout (their clocks jump; their heartbeats do not run).
func (w *world) passTime(d time.Duration, suspend ...*host) {
	if d <= 0 {
		return
	}
	var hs []*host
	for _, ho := range w.hosts {
		if contains(suspend, ho) {
			w.hostClock(ho).Jump(d)
			w.suspended(ho, w.clock.now().Add(d))
			continue
		}
		hs = append(hs, ho)
	}
	w.runClocks(hs, d, true)
}

func contains(hs []*host, ho *host) bool {
	for _, h := range hs {
		if h == ho {
			return true
		}
	}
	return false
}

// runClocks moves the clocks of hs d forward (and the true time, if
// moveTrue): for up to runFor each host's timers fire as its clock passes
// them, every host's in the order of their offsets from the start, each
// firing followed by settleHost; the rest passes as a suspension.
func (w *world) runClocks(hs []*host, d time.Duration, moveTrue bool) {
	run := min(d, runFor)
	start := make([]time.Time, len(hs))
	for i, ho := range hs {
		start[i] = w.hostClock(ho).Now()
	}
	trueStart := w.clock.now()
	for {
		best, off := -1, time.Duration(0)
		for i, ho := range hs {
			at, ok := ho.clk.Next()
			if !ok {
				continue
			}
			o := at.Sub(start[i])
			if o > run || best >= 0 && o >= off {
				continue
			}
			best, off = i, max(o, 0)
		}
		if best < 0 {
			break
		}
		if moveTrue {
			w.setTrue(trueStart.Add(off))
		}
		ho := hs[best]
		t0 := ho.clk.Now()
		ho.clk.AdvanceOne(start[best].Add(off))
		ho.hb.ran += ho.clk.Now().Sub(t0)
		w.settleHost(ho)
		w.watchFired(ho)
	}
	for i, ho := range hs {
		t0 := ho.clk.Now()
		ho.clk.AdvanceOne(start[i].Add(run)) // nothing is due by then: moves it there
		ho.hb.ran += ho.clk.Now().Sub(t0)
		if rest := d - run; rest > 0 {
			ho.clk.Jump(rest)
			w.suspended(ho, trueStart.Add(d))
		}
	}
	if moveTrue {
		w.setTrue(trueStart.Add(d))
	}
	w.watchHeartbeats()
}

// setTrue moves the true time to t (never back).
func (w *world) setTrue(t time.Time) {
	if d := t.Sub(w.clock.now()); d > 0 {
		w.clock.add(d)
	}
}

// stepClock steps ho's clock alone by d (forward or back), its timers
// shifted with it: the host's skew from the true time changes by d.
func (w *world) stepClock(ho *host, d time.Duration) {
	w.hostClock(ho).Jump(d)
	w.settleHost(ho)
}

// moveClock is a clock step of a history: s.Arg "skew" steps host s.Host's
// clock alone by s.D; otherwise time passes by s.D for every host, or,
// with s.D negative, every clock (the registry's too) steps back. With
// s.Arg "rm-heartbeat", an operator removes host s.Host's heartbeat file
// the moment its record first says "taken" meanwhile.
func (w *world) moveClock(s Step) {
	if s.Arg == "rm-heartbeat" {
		if ho, ok := w.hostOf(s); ok {
			ho.hb.rmOnTaken = true
			defer func() { ho.hb.rmOnTaken = false }()
		}
	}
	switch {
	case s.Arg == "skew":
		if ho, ok := w.hostOf(s); ok {
			w.stepClock(ho, s.D)
		}
	case s.D > 0:
		w.passTime(s.D)
	default:
		w.clock.add(s.D)
		for _, ho := range w.hosts {
			w.stepClock(ho, s.D)
		}
	}
	w.watchHeartbeats()
}

// settleHost waits until every heartbeat loop of ho's processes is back
// waiting on the host's clock and no refresh is in flight: the work a
// firing woke is done.
func (w *world) settleHost(ho *host) {
	if ho.clk == nil {
		return
	}
	for spins := 0; ; spins++ {
		running, busy := 0, 0
		for _, g := range ho.procs {
			if g == nil {
				continue
			}
			st := engine.HeartbeatOf(g)
			if st.Running {
				running++
			}
			if st.Busy {
				busy++
			}
		}
		if ho.clk.Waiters() >= running+busy && busy == 0 {
			return
		}
		if spins < 20 {
			runtime.Gosched()
		} else {
			time.Sleep(50 * time.Microsecond)
		}
	}
}

// settleClocks is settleHost for every host.
func (w *world) settleClocks() {
	for _, ho := range w.hosts {
		w.settleHost(ho)
	}
}
