package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/internal/cli"
	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
)

// snapctl's commands run in-process (package internal/cli, through
// cli.InProcess) on a host's files, disk and clock and on the history's
// registry: register (a released name claimed again, or, with --force, a
// take-over by a new host), release, release --force and setup. What a
// command printed is checked against what happened: a command that
// printed success did it.

// addCLI turns, from a generator of its own, half of a history's
// releases, forced releases and reclaims, and a third of its take-overs,
// into the snapctl command that does the same (a step KCLI, whose Arg is
// the command), and gives one history in six a setup recording a stride
// (the cluster's, or another one, which must be refused once one is
// recorded). It runs last: the steps keep their places and their hosts.
func addCLI(h *History) {
	rng := rand.New(rand.NewPCG(h.Seed, 0xc11))
	for i, s := range h.Steps {
		cmd := ""
		switch {
		case s.Kind == KRelease && rng.IntN(2) == 0:
			cmd = "release"
		case s.Kind == KForce && rng.IntN(2) == 0:
			cmd = "release --force"
		case s.Kind == KReclaim && rng.IntN(2) == 0:
			cmd = "register"
		case s.Kind == KTakeover && rng.IntN(3) == 0:
			cmd = "register --force"
		}
		if cmd != "" {
			h.Steps[i].Kind, h.Steps[i].Arg = KCLI, cmd
		}
	}
	if rng.IntN(6) == 0 && len(h.Steps) > 0 {
		at := rng.IntN(len(h.Steps) + 1)
		s := Step{Kind: KCLI, Host: 0, Arg: "setup", N: []uint64{simStride, simStride2}[rng.IntN(2)]}
		insertSteps(h, at, s)
	}
}

// snapctl runs the command of step s (KCLI) for ho and checks what it
// printed against what happened.
func (w *world) snapctl(ho *host, s Step) {
	switch s.Arg {
	case "release":
		w.cliRelease(ho)
	case "release --force":
		w.cliForce(ho, s.N)
	case "register":
		if !ho.cfg.Registry || w.running(ho) || ho.joinPending {
			return
		}
		w.cliRegister(ho, 0, false)
	case "register --force":
		if !ho.cfg.Registry || ho.joinPending {
			return
		}
		nh, err := w.addHost(ho.cfg.in(s.DC))
		if err != nil {
			w.check.violation("take-over: %v", err)
			return
		}
		nh.takeover, nh.takeSet = s.N, true
		w.exempt(ho.cfg.Name, "its name was taken over")
		nh.exempt = ""
		w.cliRegister(nh, s.N, true)
	case "setup":
		w.cliSetup(s.N)
	}
}

// runCLI runs snapctl with args for ho and returns its exit status and
// what it printed.
func (w *world) runCLI(ho *host, reg registry.NumberRegistry, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	env := cli.Env{
		Getenv: func(k string) string {
			if k == "SNAPID_BINDING_DIR" && ho != nil {
				return ho.bindings
			}
			return ""
		},
		Hostname:  func() (string, error) { return "simhost", nil },
		HomeDir:   func() (string, error) { return "", errors.New("no home directory in the simulator") },
		Stdin:     strings.NewReader(""),
		Stdout:    &out,
		Stderr:    &errOut,
		InProcess: &cli.InProcess{Registry: reg},
	}
	if ho != nil {
		env.InProcess.Options = w.options(ho)
	}
	code := cli.Run(w.opCtx(), args, env)
	if code == cli.ExitOK {
		w.reached["snapctl"]++
		w.reached["snapctl "+args[0]+map[bool]string{true: " --force"}[strings.Contains(strings.Join(args, " "), "--force")]]++
	}
	return code, out.String(), errOut.String()
}

// cliError is what a failed command's message says of the library's
// error, for the checks of Release and ForceRelease: a refusal below the
// registry's mark is definite; anything else may have an unknown
// outcome (the message does not always say).
func cliError(stderr string) error {
	msg := strings.Join(strings.Fields(stderr), " ") // snapctl wraps its errors
	if strings.Contains(msg, registry.ErrMarkMoved.Error()) {
		return fmt.Errorf("%s: %w", msg, registry.ErrMarkMoved)
	}
	return fmt.Errorf("%s: %w", msg, engine.ErrRegistry)
}

// cliRelease is KRelease through `snapctl release`: reported done
// ("released NAME (last number F)"), the registry shows it released at
// F, at or above every number handed out under the name.
func (w *world) cliRelease(ho *host) {
	if !ho.cfg.Registry {
		return
	}
	w.closeAll(ho)
	before := w.check.snapshot(ho)
	code, out, errOut := w.runCLI(ho, w.regs[ho.cfg.DC], "release", "--name", ho.cfg.Name, "--counter", ho.counter)
	if code != cli.ExitOK {
		w.check.released(ho, 0, cliError(errOut), before)
		return
	}
	var name string
	var final uint64
	if _, err := fmt.Sscanf(out, "released %s (last number %d)", &name, &final); err != nil || name != ho.cfg.Name {
		w.check.violation("snapctl release of %s on h%d succeeded but printed %q", ho.cfg.Name, ho.i, out)
		return
	}
	w.did(1)
	w.check.released(ho, final, nil, before)
	if high := w.check.high[ho.cfg.Name]; final < high {
		w.check.violation("snapctl release of %s on h%d printed last number %d, below %d, which was handed out", ho.cfg.Name, ho.i, final, high)
	}
}

// cliForce is KForce through `snapctl release --force --start N`.
func (w *world) cliForce(ho *host, next uint64) {
	if !ho.cfg.Registry || ho.joinPending {
		return
	}
	next = max(next, 1) // --start 0 is bad input, refused before anything
	for p, g := range ho.procs {
		if g == nil {
			continue
		}
		// As forceRelease: the holder still runs, and moves the mark
		// between the command's read of the row and its release.
		w.reg.onNextRelease(func() {
			n := uint64(2 * reserveStep)
			if first, err := g.NextNContext(w.opCtx(), n); err == nil {
				w.did(int(n))
				w.check.issued(ho, p, ho.cfg.Name, first, n)
			}
			engine.Settle(g)
		})
		break
	}
	was, hadRow := w.reg0.Row(ho.cfg.Name)
	code, out, errOut := w.runCLI(nil, w.reg, "release", "--force", "--start", fmt.Sprint(next), "--name", ho.cfg.Name)
	w.reg.onNextRelease(nil)
	var err error
	var final uint64
	if code != cli.ExitOK {
		err = cliError(errOut)
	} else {
		var name string
		if _, serr := fmt.Sscanf(out, "released %s (last number %d)", &name, &final); serr != nil || name != ho.cfg.Name {
			w.check.violation("snapctl release --force of %s succeeded but printed %q", ho.cfg.Name, out)
			return
		}
		w.did(1)
		if high := w.check.high[ho.cfg.Name]; final < high {
			w.check.violation("snapctl release --force of %s printed last number %d, below %d, which was handed out", ho.cfg.Name, final, high)
		}
	}
	w.check.forceReleased(ho, next, final, err, was, hadRow)
	if err == nil || !errors.Is(err, registry.ErrMarkMoved) {
		w.exempt(ho.cfg.Name, "its name was force-released")
	}
}

// cliRegister is `snapctl register` for ho (with --force --start
// floor+1: a take-over): reported done ("registered NAME for PATH
// (owner O, next number K)"), the registry shows the name active under
// this counter's owner token, and K is above every number handed out
// under the name (and, forced, at or above the start given).
func (w *world) cliRegister(ho *host, floor uint64, force bool) {
	args := []string{"register", "--name", ho.cfg.Name, "--counter", ho.counter, fmt.Sprintf("--sync=%v", ho.cfg.Sync)}
	start := floor + 1
	if force {
		if floor == 1<<64-1 {
			start = floor
		}
		args = append(args, "--force", "--start", fmt.Sprint(start))
	}
	code, out, _ := w.runCLI(ho, w.regs[ho.cfg.DC], args...)
	if code != cli.ExitOK {
		w.reclaimFailed(ho)
		return
	}
	w.did(1)
	ho.released = false
	ho.releaseUnsynced = false
	ho.opened = true
	var name, path, ownerID string
	var next uint64
	if _, err := fmt.Sscanf(out, "registered %s for %s (owner %s next number %d)", &name, &path, &ownerID, &next); err != nil || name != ho.cfg.Name {
		w.check.violation("snapctl register of %s on h%d succeeded but printed %q", ho.cfg.Name, ho.i, out)
		return
	}
	owner, err := admin.OwnerToken(ho.counter)
	row, ok := w.reg0.Row(ho.cfg.Name)
	if err != nil || !ok || row.Owner != owner || row.State != registry.StateActive {
		w.check.violation("snapctl register of %s on h%d printed success but the registry shows %+v", ho.cfg.Name, ho.i, row)
	}
	if high, ok := w.check.high[ho.cfg.Name]; ok && next <= high {
		w.check.violation("snapctl register of %s on h%d printed next number %d, not above %d, which was handed out", ho.cfg.Name, ho.i, next, high)
	}
	if force && next < start {
		w.check.violation("snapctl register --force --start %d of %s printed next number %d, below the start", start, ho.cfg.Name, next)
	}
}

// cliSetup is `snapctl setup --replication 1 --stride S`: the cluster's
// stride when none is recorded yet (another would refuse the striped
// hosts), else S. Reported done, the registry records S; refused, the
// stride recorded did not change (once one was recorded).
func (w *world) cliSetup(stride uint64) {
	ctx := context.Background()
	before, err := w.reg0.inDC(0).Stride(ctx)
	if err != nil {
		return
	}
	if before == 0 {
		stride = simStride
	}
	code, out, _ := w.runCLI(nil, w.reg, "setup", "--replication", "1", "--stride", fmt.Sprint(stride))
	after, err := w.reg0.inDC(0).Stride(ctx)
	if err != nil {
		return
	}
	switch {
	case code == cli.ExitOK:
		w.did(1)
		w.reached["setup"]++
		if after != stride || !strings.Contains(out, fmt.Sprintf("stride %d recorded", stride)) {
			w.check.violation("snapctl setup --stride %d printed %q but the registry records stride %d", stride, out, after)
		}
	case before != 0 && after != before:
		// (With none recorded, a failure may have recorded it: an answer
		// lost after the registry applied it.)
		w.check.violation("snapctl setup --stride %d failed but the registry's stride moved from %d to %d", stride, before, after)
	}
}
