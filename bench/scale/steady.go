package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/registry"
)

// The steady run: hosts issuing ids and sequence numbers at a fixed rate
// against the registries, while the sequences' space is read.

// SteadyRun is one fleet size in steady state.
type SteadyRun struct {
	Hosts           int                `json:"hosts"`
	Procs           int                `json:"procs"`
	Compress        int                `json:"compress"`
	EquivalentHosts int                `json:"equivalent_hosts"`
	DurationS       float64            `json:"duration_s"`
	PerSec          map[string]float64 `json:"per_sec"`      // calls per second by kind
	LWTPerSec       float64            `json:"lwt_per_sec"`  // all LWTs
	PerHostMin      map[string]float64 `json:"per_host_min"` // calls per real host per real minute, by kind
	Latency         map[string]Latency `json:"latency"`
	Failed          map[string]int     `json:"failed"`
	Refused         map[string]int     `json:"refused"`
	OpenSeconds     float64            `json:"open_seconds"` // to open every process
}

// runSteady opens n hosts of c.procs processes each, waits one compressed
// interval, then records the registry's load for c.duration.
func runSteady(ctx context.Context, c config, regs []*timedRegistry, rec *recorder, dir string, n int) (SteadyRun, error) {
	interval := time.Minute / time.Duration(c.compress)
	start := time.Now()
	gens, seqs, err := openSteadyHosts(c, regs, dir, n, interval)
	defer closeSteadyHosts(gens, seqs)
	if err != nil {
		return SteadyRun{}, err
	}
	opened := time.Since(start)
	// The space-left metric: one process per host reads it every
	// compressed minute, at a random phase, as a scrape would.
	stopReaders := readSpaces(ctx, seqs, interval)
	time.Sleep(interval + interval/2) // every process past its first poll
	rec.start()
	t0 := time.Now()
	time.Sleep(c.duration)
	elapsed := time.Since(t0)
	lat, failed, refused := rec.stop()
	stopReaders()
	run := SteadyRun{Hosts: n, Procs: c.procs, Compress: c.compress, EquivalentHosts: n * c.compress, DurationS: elapsed.Seconds(),
		PerSec: map[string]float64{}, PerHostMin: map[string]float64{}, Latency: map[string]Latency{}, Failed: failed, Refused: refused,
		OpenSeconds: opened.Seconds()}
	for kind, ds := range lat {
		rate := float64(len(ds)) / elapsed.Seconds()
		run.PerSec[kind] = rate
		// Per real host per real minute: a simulated host runs K
		// minutes of the library's time per minute.
		run.PerHostMin[kind] = rate * 60 / float64(n) / float64(c.compress)
		run.Latency[kind] = summarize(ds)
		if lwtKinds[kind] {
			run.LWTPerSec += rate
		}
	}
	log.Printf("steady %d hosts × %d processes (≈ %d hosts): %.1f LWT/s, heartbeats %.2f per host per minute, status reads %.2f",
		n, c.procs, run.EquivalentHosts, run.LWTPerSec, run.PerHostMin["touch"], run.PerHostMin["status"])
	return run, nil
}

// steadyConfig is the configuration of the processes of host number host
// of the steady run in dir, with the library's intervals set to interval.
func steadyConfig(reg registry.Registry, dir string, host int, interval time.Duration) snapid.Config {
	return snapid.Config{
		Registry: &snapid.RegistryConfig{
			Registry:    reg,
			Host:        snapid.HostInfo{Hostname: fmt.Sprintf("h%d", host), MachineID: fmt.Sprintf("m-%s-%d", filepath.Base(dir), host)},
			Heartbeat:   interval,
			CloneWindow: -1, // no clone check
		},
		NoSync: true,
		// Each host keeps its records of names in a place of its own.
		BindingDir: filepath.Join(dir, strconv.Itoa(host), "records"),
	}
}

// openSteadyHosts opens the n hosts of a steady run in dir, 32 at a time:
// each host's c.procs Generators and one Sequence, which takes its first
// number. It returns what it opened, by host, even with an error (every
// host's, joined).
func openSteadyHosts(c config, regs []*timedRegistry, dir string, n int, interval time.Duration) ([][]*snapid.Generator, []*snapid.Sequence, error) {
	gens := make([][]*snapid.Generator, n)
	seqs := make([]*snapid.Sequence, n)
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for h := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			gens[h], seqs[h], errs[h] = openSteadyHost(c, regs[h%len(regs)], dir, h, interval)
		})
	}
	wg.Wait()
	return gens, seqs, errors.Join(errs...)
}

// openSteadyHost opens host number h of a steady run in dir: its
// directory, c.procs Generators on its counter, and a Sequence, which
// takes its first number. It returns what it opened even with an error.
func openSteadyHost(c config, reg *timedRegistry, dir string, h int, interval time.Duration) ([]*snapid.Generator, *snapid.Sequence, error) {
	hostDir := filepath.Join(dir, strconv.Itoa(h))
	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		return nil, nil, err
	}
	var gens []*snapid.Generator
	for range c.procs {
		g, err := snapid.Open(filepath.Join(hostDir, "counter.u64"), fmt.Sprintf("%s_%d", filepath.Base(dir), h), steadyConfig(reg, dir, h, interval))
		if err != nil {
			return gens, nil, err
		}
		gens = append(gens, g)
	}
	s, err := gens[0].Sequence("scale")
	if err != nil {
		return gens, nil, err
	}
	_, err = s.Next()
	return gens, s, err
}

// closeSteadyHosts closes the hosts' Sequences and Generators, host by
// host.
func closeSteadyHosts(gens [][]*snapid.Generator, seqs []*snapid.Sequence) {
	for h := range seqs {
		if seqs[h] != nil {
			seqs[h].Close()
		}
		for _, g := range gens[h] {
			g.Close()
		}
	}
}

// readSpaces starts the space-left metric's readers: one process per host
// reads it every compressed minute (interval), at a random phase, as a
// scrape would. The function it returns stops them and waits for them.
func readSpaces(ctx context.Context, seqs []*snapid.Sequence, interval time.Duration) (stop func()) {
	mctx, stopMetrics := context.WithCancel(ctx)
	var mwg sync.WaitGroup
	for h := range seqs {
		mwg.Go(func() {
			t := time.NewTimer(rand.N(interval))
			defer t.Stop()
			for {
				select {
				case <-mctx.Done():
					return
				case <-t.C:
				}
				_, _ = seqs[h].Space(mctx)
				t.Reset(interval)
			}
		})
	}
	return func() {
		stopMetrics()
		mwg.Wait()
	}
}
