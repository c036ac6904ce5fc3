package claim

import (
	"cmp"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// hbModel runs the host's heartbeat as heartbeat() does, on a model of
// time: every process polls on the dot at its own phase, decides with
// HeartbeatDue (again under the record's lock, for those without the
// role), records its try, and its refresh is answered after a latency.
// Process 0 holds the role. Events at one instant run in process order,
// the holder first: the order that favours the holder's tries.
type hbModel struct {
	interval time.Duration
	phases   []time.Duration // each process's first poll, within a poll
	// answer says, for process i's try sent at t, whether it reaches the
	// registry and after how long its answer comes (never: the process
	// is stopped mid-call).
	answer func(i int, t time.Duration) (ok bool, after time.Duration, never bool)

	rec      Heartbeat
	fails    []int64
	busy     []time.Duration // -1: the process's try in flight never returns
	pending  []func()        // the answer of the process's try in flight
	sent     []time.Duration // sends that reached the registry, in order
	tries    []time.Duration // every send
	answerAt []time.Duration
}

func (m *hbModel) at(t time.Duration) time.Time { return time.Unix(0, 0).Add(time.Hour + t) }

// run models the host until end, from a claim at 0.
func (m *hbModel) run(end time.Duration) {
	n := len(m.phases)
	m.fails = make([]int64, n)
	m.busy = make([]time.Duration, n)
	m.pending = make([]func(), n)
	m.answerAt = make([]time.Duration, n)
	m.rec = Heartbeat{Session: 1, Last: m.at(0).UnixNano(), Tried: m.at(0).UnixNano()}
	poll := Poll(m.interval)
	// Polls in time order; at one instant, in process order.
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(m.phases[a], m.phases[b]) })
	for tick := time.Duration(0); tick < end; tick += poll {
		for _, i := range order {
			now := tick + m.phases[i]
			// Answers that came before this poll.
			if m.pending[i] != nil && m.busy[i] >= 0 && m.answerAt[i] <= now {
				m.pending[i]()
				m.pending[i] = nil
			}
			if m.pending[i] != nil {
				continue // a try in flight
			}
			holder := i == 0
			if !HeartbeatDue(m.rec, m.at(now), m.interval, holder, m.fails[i]) {
				continue
			}
			m.rec.Tried = m.at(now).UnixNano()
			m.rec.Retry = holder && m.fails[i] > 0
			m.tries = append(m.tries, now)
			ok, after, never := m.answer(i, now)
			sent := now
			m.answerAt[i] = now + after
			if never {
				m.busy[i] = -1
			}
			m.pending[i] = func() {
				if !ok {
					m.fails[i]++
					return
				}
				m.fails[i] = 0
				m.sent = append(m.sent, sent)
				for _, p := range []*int64{&m.rec.Tried, &m.rec.Last} {
					*p = max(*p, m.at(sent).UnixNano())
				}
			}
		}
	}
}

// worstGap is the longest time between consecutive sends that reached the
// registry, from the claim at 0 to until.
func (m *hbModel) worstGap(until time.Duration) time.Duration {
	prev, worst := time.Duration(0), time.Duration(0)
	for _, s := range m.sent {
		if s > until {
			break
		}
		worst = max(worst, s-prev)
		prev = s
	}
	return max(worst, until-prev)
}

// Every phase of the holder and two other processes on a grid of an
// eighth of a poll: while the holder's calls fail and the others' reach
// the registry, or the holder is stopped mid-call, no send that reached
// the registry is more than an interval and seven eighths after the last
// (the documented bound, before the timeout it takes to arrive); and
// during an outage the host sends about two tries per interval.
func TestHeartbeatModelBounds(t *testing.T) {
	t.Parallel()
	const interval = 1600 * time.Millisecond
	poll := Poll(interval)
	bound := interval + interval/2 + interval/4 + interval/8
	step := poll / 8
	type answer = func(i int, t time.Duration) (bool, time.Duration, bool)
	for _, c := range []struct {
		name   string
		answer func() answer // a fresh one per run
	}{
		{"holder's calls fail", func() answer {
			return func(i int, _ time.Duration) (bool, time.Duration, bool) { return i != 0, 0, false }
		}},
		{"holder's calls fail slowly", func() answer {
			return func(i int, _ time.Duration) (bool, time.Duration, bool) {
				if i == 0 {
					return false, poll / 2, false
				}
				return true, 0, false
			}
		}},
		{"holder's calls fail, every third goes through", func() answer {
			n := 0
			return func(i int, _ time.Duration) (bool, time.Duration, bool) {
				if i != 0 {
					return true, 0, false
				}
				n++
				return n%3 == 0, 0, false
			}
		}},
		{"holder stopped mid-call", func() answer {
			return func(i int, _ time.Duration) (bool, time.Duration, bool) { return i != 0, 0, i == 0 }
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			worst, at := time.Duration(0), ""
			for ph := time.Duration(0); ph < poll; ph += step {
				for p1 := time.Duration(0); p1 < poll; p1 += step {
					for p2 := p1; p2 < poll; p2 += 2 * step {
						m := &hbModel{interval: interval, phases: []time.Duration{ph, p1, p2}, answer: c.answer()}
						m.run(12 * interval)
						if g := m.worstGap(12 * interval); g > worst {
							worst, at = g, fmt.Sprintf("phases %v %v %v, sends %v", ph, p1, p2, m.sent)
						}
					}
				}
			}
			t.Logf("worst gap %v (bound %v)", worst, bound)
			assert.LessOrEqual(t, worst, bound, "at %s", at)
		})
	}

	t.Run("outage", func(t *testing.T) {
		worst := 0.0
		for ph := time.Duration(0); ph < poll; ph += step {
			for p1 := time.Duration(0); p1 < poll; p1 += step {
				phases := []time.Duration{ph}
				for k := range 7 {
					phases = append(phases, (p1+time.Duration(k)*step*3)%poll)
				}
				m := &hbModel{interval: interval, phases: phases,
					answer: func(int, time.Duration) (bool, time.Duration, bool) { return false, 0, false }}
				m.run(23 * interval)
				n := 0
				for _, s := range m.tries {
					if s >= 3*interval {
						n++
					}
				}
				worst = max(worst, float64(n)/20)
			}
		}
		t.Logf("8 processes in an outage: at most %.2f tries per interval", worst)
		assert.LessOrEqual(t, worst, 2.1)
	})
}

// The holder alone through an outage of ten intervals tries once per
// interval (its back-off is capped at four polls), and its first refresh
// after the outage reaches the registry within an interval and a poll.
func TestHeartbeatModelBackOffCap(t *testing.T) {
	t.Parallel()
	const interval = 1600 * time.Millisecond
	poll := Poll(interval)
	back := 10 * interval
	m := &hbModel{interval: interval, phases: []time.Duration{poll / 3},
		answer: func(_ int, t time.Duration) (bool, time.Duration, bool) { return t >= back, 0, false }}
	m.run(20 * interval)
	if assert.NotEmpty(t, m.sent) {
		assert.LessOrEqual(t, m.sent[0]-back, interval+poll, "the first refresh after the outage, %v after its end", m.sent[0]-back)
	}
}
