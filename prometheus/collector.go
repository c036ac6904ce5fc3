// Package prometheus exposes a snapid Generator's state as Prometheus
// metrics (github.com/prometheus/client_golang). It is a separate package
// so that a program using snapid without metrics links no Prometheus code.
//
// One Collector serves one Generator; the embedding program registers it:
//
//	g, err := snapid.Open(path, "web_1", snapid.Config{Registry: &snapid.RegistryConfig{Registry: reg}})
//	…
//	prometheus.MustRegister(snapidprom.NewCollector(g, snapidprom.Opts{}))
//
// Every metric carries the labels name (the node name) and form (the id
// form, snapid.Format: name, decimal or striped); Opts.ConstLabels adds
// others. The metrics, all read at scrape time:
//
//	snapid_ids_issued_total                          ids handed to callers (see snapid.Stats.IDsIssued)
//	snapid_numbers_reserved_total                    numbers taken from the counter file
//	snapid_file_updates_total                        counter file updates
//	snapid_file_update_duration_seconds              histogram: lock wait, write and fdatasync of each update
//	snapid_file_update_size_numbers                  histogram: numbers per update (the group-commit group size)
//	snapid_counter_last_issued                       the counter's last issued number (host-wide)
//
// and with a registry (snapid.Config.Registry):
//
//	snapid_reservation_mark                          the host's reserved-up-to mark
//	snapid_reservation_left_numbers                  numbers left below the mark
//	snapid_reservation_left_seconds                  the same at the counter's recent rate (+Inf when idle)
//	snapid_registry_calls_total{call,outcome}        calls by kind and outcome (applied, condition_failed, resolved, error)
//	snapid_registry_last_contact_timestamp_seconds   last call that reached the registry
//	snapid_registry_last_extension_timestamp_seconds last extension of the mark
//	snapid_registry_last_heartbeat_timestamp_seconds last refresh of last-seen
//	snapid_session_held                              1 while this host's claim stands, 0 once superseded
//
// and for each integer sequence open in the Generator (snapid.Generator.Sequence),
// with the label sequence:
//
//	snapid_sequence_numbers_issued_total             numbers handed to callers by this process
//	snapid_sequence_leases_total                     leases this process took from the registry
//	snapid_sequence_lease_left_numbers               numbers left in the host's lease file (current range and the one ahead)
//	snapid_sequence_space_left_numbers               numbers of the sequence no host has leased yet (cluster-wide)
//	snapid_sequence_space_left_ratio                 the same over the sequence's size (max-start+1)
//	snapid_sequence_space_checked_timestamp_seconds  when the registry last answered for the two above
//
// Numbers are exported as float64 gauges and counters, exact up to 2^53.
// The counter, the mark and a sequence's lease file are read under their
// lock, so a scrape waits for an update in progress; after the Generator
// (or the Sequence) is closed they are left out; a sequence's counts stay.
// A sequence's space left is read from the registry
// (snapid.Sequence.Space) at most once per Opts.SequenceSpaceInterval, for
// all sequences at once, and a scrape waits for the answers at most
// Opts.RegistryTimeout in all: a scrape between two reads, or while the
// registry cannot be reached or is slow, exports the last answer (the
// timestamp tells its age), and none before the first.
//
// Imports: snapid and client_golang. Imported by programs that export
// metrics (and examples); nothing in snapid, cassandra or cmd/snapctl
// imports it, so a program that does not export metrics links no
// client_golang.
package prometheus

import (
	"context"
	"math"
	"sync"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/snapid/snapid"
	"github.com/snapid/snapid/registry"
)

// Opts configures a Collector.
type Opts struct {
	// ConstLabels are added to every metric, besides name and form.
	ConstLabels prom.Labels
	// RateWindow is how far back the rate behind
	// snapid_reservation_left_seconds looks (default 10 minutes). The rate
	// is measured between scrapes, so the metric appears from the second
	// scrape on.
	RateWindow time.Duration
	// SequenceSpaceInterval is how often a scrape asks the registry for a
	// sequence's space left (default 1 minute).
	SequenceSpaceInterval time.Duration
	// RegistryTimeout is how long a scrape waits for those answers, in all
	// (default 2 seconds). A question goes on for up to the interval; an
	// answer that comes after the scrape is exported by the next one.
	RegistryTimeout time.Duration
	// Now is the clock (default time.Now), for tests.
	Now func() time.Time
}

// Collector is a prometheus.Collector for one Generator. It is safe for
// concurrent use.
type Collector struct {
	g                      *snapid.Generator
	window                 time.Duration
	spaceEvery, regTimeout time.Duration
	now                    func() time.Time

	issued, reserved, updates, latency, size, counter  *prom.Desc
	mark, leftNumbers, leftSeconds, calls              *prom.Desc
	lastContact, lastExtension, lastHeartbeat, session *prom.Desc
	seqIssued, seqLeases, seqLeaseLeft                 *prom.Desc
	seqSpaceLeft, seqSpaceRatio, seqSpaceChecked       *prom.Desc

	mu      sync.Mutex
	samples []sample // the counter at past scrapes, oldest first, within window

	spaceMu    sync.Mutex // guards spaceCache and its entries
	spaceCache map[string]*spaceEntry
}

// spaceEntry is the registry's last answer about a sequence's space.
type spaceEntry struct {
	asked    time.Time // when the registry was last asked, answered or not
	checked  time.Time // when the question it last answered was asked; zero if never
	space    registry.SequenceSpace
	inFlight chan struct{} // closed when the question in flight is answered or fails; nil if none
}

type sample struct {
	at time.Time
	v  uint64
}

// NewCollector returns the Collector of g.
func NewCollector(g *snapid.Generator, opts Opts) *Collector {
	form, _, _ := g.Form()
	labels := prom.Labels{"name": g.Name(), "form": form.String()}
	for k, v := range opts.ConstLabels {
		labels[k] = v
	}
	d := func(name, help string, vars ...string) *prom.Desc {
		return prom.NewDesc("snapid_"+name, help, vars, labels)
	}
	c := &Collector{
		g: g, window: opts.RateWindow, now: opts.Now,
		issued:        d("ids_issued_total", "Ids handed to callers by this Generator."),
		reserved:      d("numbers_reserved_total", "Numbers this Generator took from the counter file."),
		updates:       d("file_updates_total", "Counter file updates made by this Generator."),
		latency:       d("file_update_duration_seconds", "Time of each counter file update: lock wait, write and fdatasync."),
		size:          d("file_update_size_numbers", "Numbers taken by each counter file update (the group-commit group size, or a block)."),
		counter:       d("counter_last_issued", "The counter file's last issued number (host-wide)."),
		mark:          d("reservation_mark", "The host's reserved-up-to mark: no number above it is issued until the registry extends it."),
		leftNumbers:   d("reservation_left_numbers", "Numbers left below the reserved-up-to mark."),
		leftSeconds:   d("reservation_left_seconds", "Seconds until the reserved-up-to mark at the counter's recent rate (+Inf when idle)."),
		calls:         d("registry_calls_total", "Registry calls by kind and outcome (applied, condition_failed, resolved: unknown then resolved, error).", "call", "outcome"),
		lastContact:   d("registry_last_contact_timestamp_seconds", "When a registry call last reached the registry."),
		lastExtension: d("registry_last_extension_timestamp_seconds", "When the reserved-up-to mark was last extended."),
		lastHeartbeat: d("registry_last_heartbeat_timestamp_seconds", "When last-seen was last refreshed in the registry."),
		session:       d("session_held", "1 while this host's claim of the name stands, 0 once another claim superseded it."),

		seqIssued:       d("sequence_numbers_issued_total", "Numbers of the sequence handed to callers by this process.", "sequence"),
		seqLeases:       d("sequence_leases_total", "Leases of the sequence this process took from the registry for its host.", "sequence"),
		seqLeaseLeft:    d("sequence_lease_left_numbers", "Numbers left in the host's lease of the sequence (its current range and the one taken ahead).", "sequence"),
		seqSpaceLeft:    d("sequence_space_left_numbers", "Numbers of the sequence no host has leased yet, cluster-wide.", "sequence"),
		seqSpaceRatio:   d("sequence_space_left_ratio", "Numbers of the sequence no host has leased yet, over its size (max-start+1).", "sequence"),
		seqSpaceChecked: d("sequence_space_checked_timestamp_seconds", "When the registry last answered how much of the sequence is left.", "sequence"),
		spaceCache:      map[string]*spaceEntry{},
	}
	if c.window <= 0 {
		c.window = 10 * time.Minute
	}
	c.spaceEvery, c.regTimeout = opts.SequenceSpaceInterval, opts.RegistryTimeout
	if c.spaceEvery <= 0 {
		c.spaceEvery = time.Minute
	}
	if c.regTimeout <= 0 {
		c.regTimeout = 2 * time.Second
	}
	if c.now == nil {
		c.now = time.Now
	}
	return c
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prom.Desc) {
	for _, d := range []*prom.Desc{c.issued, c.reserved, c.updates, c.latency, c.size, c.counter,
		c.mark, c.leftNumbers, c.leftSeconds, c.calls, c.lastContact, c.lastExtension, c.lastHeartbeat, c.session,
		c.seqIssued, c.seqLeases, c.seqLeaseLeft, c.seqSpaceLeft, c.seqSpaceRatio, c.seqSpaceChecked} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prom.Metric) {
	c.collectSequences(ch)
	st := c.g.Stats()
	ch <- prom.MustNewConstMetric(c.issued, prom.CounterValue, float64(st.IDsIssued))
	ch <- prom.MustNewConstMetric(c.reserved, prom.CounterValue, float64(st.NumbersReserved))
	ch <- prom.MustNewConstMetric(c.updates, prom.CounterValue, float64(st.CounterUpdates))
	ch <- histogram(c.latency, st.UpdateLatencySeconds)
	ch <- histogram(c.size, st.UpdateSizeNumbers)
	if rs := st.Registry; rs != nil {
		for _, k := range rs.Calls {
			ch <- prom.MustNewConstMetric(c.calls, prom.CounterValue, float64(k.Count), k.Call, k.Outcome)
		}
		timestamp(ch, c.lastContact, rs.LastContact)
		timestamp(ch, c.lastExtension, rs.LastExtension)
		timestamp(ch, c.lastHeartbeat, rs.LastHeartbeat)
		ch <- prom.MustNewConstMetric(c.session, prom.GaugeValue, boolValue(rs.SessionHeld))
	}
	res, err := c.g.Reservation()
	if err != nil {
		return // closed, or the counter cannot be read: left out
	}
	ch <- prom.MustNewConstMetric(c.counter, prom.GaugeValue, float64(res.Counter))
	rate, ok := c.rate(res.Counter)
	if !res.Registry {
		return
	}
	ch <- prom.MustNewConstMetric(c.mark, prom.GaugeValue, float64(res.Mark))
	ch <- prom.MustNewConstMetric(c.leftNumbers, prom.GaugeValue, float64(res.LeftNumbers))
	if ok {
		left := math.Inf(1)
		if rate > 0 {
			left = float64(res.LeftNumbers) / rate
		}
		ch <- prom.MustNewConstMetric(c.leftSeconds, prom.GaugeValue, left)
	}
}

// rate records the counter's value v now and returns its rate per second
// over the window, if an earlier scrape gives one.
func (c *Collector) rate(v uint64) (float64, bool) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.samples = append(c.samples, sample{now, v})
	// Keep the newest sample at least window old as the start.
	for len(c.samples) > 2 && !c.samples[1].at.After(now.Add(-c.window)) {
		c.samples = c.samples[1:]
	}
	first := c.samples[0]
	dt := now.Sub(first.at).Seconds()
	if dt <= 0 {
		return 0, false
	}
	if v < first.v {
		return 0, true // the counter went backwards (a repair): no rate
	}
	return float64(v-first.v) / dt, true
}

func histogram(d *prom.Desc, h snapid.Histogram) prom.Metric {
	buckets := make(map[float64]uint64, len(h.Bounds))
	for i, b := range h.Bounds {
		buckets[b] = h.Counts[i]
	}
	return prom.MustNewConstHistogram(d, h.Count, h.Sum, buckets)
}

func timestamp(ch chan<- prom.Metric, d *prom.Desc, t time.Time, labelValues ...string) {
	if !t.IsZero() {
		ch <- prom.MustNewConstMetric(d, prom.GaugeValue, float64(t.UnixNano())/1e9, labelValues...)
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// collectSequences exports the metrics of the Generator's sequences: the
// counts of every sequence it opened (closed Sequences included, so that
// they never go down), and the lease and space left of the open ones.
func (c *Collector) collectSequences(ch chan<- prom.Metric) {
	for _, st := range c.g.SequenceTotals() {
		ch <- prom.MustNewConstMetric(c.seqIssued, prom.CounterValue, float64(st.NumbersIssued), st.Sequence)
		ch <- prom.MustNewConstMetric(c.seqLeases, prom.CounterValue, float64(st.Leases), st.Sequence)
	}
	open := map[string]*snapid.Sequence{}
	for _, s := range c.g.Sequences() {
		if open[s.Name()] == nil {
			open[s.Name()] = s
		}
	}
	spaces := c.spaces(open)
	for name, s := range open {
		if l, err := s.Lease(); err == nil {
			ch <- prom.MustNewConstMetric(c.seqLeaseLeft, prom.GaugeValue, float64(l.LeftNumbers), name)
		}
		if e, ok := spaces[name]; ok && !e.checked.IsZero() {
			ch <- prom.MustNewConstMetric(c.seqSpaceLeft, prom.GaugeValue, float64(e.space.LeftNumbers), name)
			ch <- prom.MustNewConstMetric(c.seqSpaceRatio, prom.GaugeValue, e.space.LeftRatio, name)
			timestamp(ch, c.seqSpaceChecked, e.checked, name)
		}
	}
}

// spaces returns the registry's last answers about the open sequences'
// space. It asks again, for all of them at once, where the last question
// is older than the interval, and waits for the answers at most the
// registry timeout in all: a scrape never waits longer, however many
// sequences there are; an answer that comes later is kept for the next
// scrape. Sequences no longer open are forgotten.
func (c *Collector) spaces(open map[string]*snapid.Sequence) map[string]spaceEntry {
	waits := c.askSpaces(open, c.now())
	waitAll(waits, c.regTimeout)
	c.spaceMu.Lock()
	defer c.spaceMu.Unlock()
	out := make(map[string]spaceEntry, len(open))
	for name := range open {
		if e := c.spaceCache[name]; e != nil {
			out[name] = *e
		}
	}
	return out
}

// askSpaces asks the registry again, in the background, for the space of
// each open sequence whose last question is older than the interval at
// now, and forgets the sequences no longer open that have no question in
// flight. It returns the channels that close when the questions in flight
// are answered.
func (c *Collector) askSpaces(open map[string]*snapid.Sequence, now time.Time) []chan struct{} {
	var waits []chan struct{}
	c.spaceMu.Lock()
	defer c.spaceMu.Unlock()
	for name, s := range open {
		e := c.spaceCache[name]
		if e == nil {
			e = &spaceEntry{}
			c.spaceCache[name] = e
		}
		if e.inFlight == nil && (e.asked.IsZero() || now.Sub(e.asked) >= c.spaceEvery) {
			e.asked, e.inFlight = now, make(chan struct{})
			go c.refresh(s, e, now)
		}
		if e.inFlight != nil {
			waits = append(waits, e.inFlight)
		}
	}
	for name, e := range c.spaceCache {
		if open[name] == nil && e.inFlight == nil {
			delete(c.spaceCache, name)
		}
	}
	return waits
}

// waitAll waits until every channel of waits is closed, or for timeout at
// most in all.
func waitAll(waits []chan struct{}, timeout time.Duration) {
	if len(waits) == 0 {
		return
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for _, w := range waits {
		select {
		case <-w:
		case <-timer.C:
			return
		}
	}
}

// refresh asks the registry for s's space, asked at the time at, and
// records the answer in e. The question may take up to the interval.
func (c *Collector) refresh(s *snapid.Sequence, e *spaceEntry, at time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), max(c.spaceEvery, c.regTimeout))
	sp, err := s.Space(ctx)
	cancel()
	c.spaceMu.Lock()
	defer c.spaceMu.Unlock()
	if err == nil {
		e.space, e.checked = sp, at
	}
	close(e.inFlight)
	e.inFlight = nil
}
