package snapid_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gatedTouch is one process's view of a shared registry with its Touch
// shaped by the test.
type gatedTouch struct {
	*registrytest.Registry
	touch func(ctx context.Context, inner func() error) error
}

func (g *gatedTouch) Touch(ctx context.Context, name, owner, session string) error {
	inner := func() error { return g.Registry.Touch(ctx, name, owner, session) }
	if g.touch == nil {
		return inner()
	}
	return g.touch(ctx, inner)
}

// A take-over learned by one process (M) is written to the record, and
// another process's (N) refresh that was applied before the take-over but
// answered after it does not overwrite it: the host's other processes stop
// at one of their next polls, and new joins are refused.
func TestHeartbeatTakenRecordNotOverwritten(t *testing.T) {
	const hb = 100 * time.Millisecond
	reg := registrytest.NewRegistry()
	dir := t.TempDir()
	path := filepath.Join(dir, "a", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(path), 0o755))
	opts := []Option{WithHeartbeat(hb), WithRegistryTimeout(5 * time.Second), WithCloneWindow(0), WithReserveStep(1 << 20)}
	armed := make(chan struct{})
	wH := &gatedTouch{Registry: reg, touch: func(ctx context.Context, inner func() error) error {
		select {
		case <-armed:
			<-ctx.Done() // the holder's registry connection hangs
			return fmt.Errorf("%w: timed out", ErrRegistry)
		default:
			return inner()
		}
	}}
	H := openReg(t, path, "web_1", wH, opts...)
	defer H.Close()
	require.Eventually(t, H.ExportHeartbeatHolder, 2*time.Second, 5*time.Millisecond)
	nInFlight, releaseN := make(chan struct{}), make(chan struct{})
	takenOver := make(chan struct{})
	wN := &gatedTouch{Registry: reg}
	wN.touch = func(ctx context.Context, inner func() error) error {
		select {
		case <-armed:
		default:
			return inner()
		}
		err := inner() // applied before the take-over...
		select {
		case <-nInFlight:
		default:
			close(nInFlight)
		}
		<-releaseN // ...answered after it
		return err
	}
	wM := &gatedTouch{Registry: reg}
	wM.touch = func(ctx context.Context, inner func() error) error {
		select {
		case <-armed:
			<-takenOver
		default:
		}
		return inner()
	}
	N := openReg(t, path, "web_1", wN, opts...)
	defer N.Close()
	M := openReg(t, path, "web_1", wM, opts...)
	defer M.Close()
	close(armed)
	<-nInFlight
	taker, err := Open(filepath.Join(dir, "c2.u64"), "web_1", WithRegistry(reg), WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}), WithBindingDir(t.TempDir()),
		WithTakeover(0), WithSync(false), WithCloneWindow(0))
	require.NoError(t, err)
	defer taker.Close()
	close(takenOver)
	require.Eventually(t, func() bool { _, err := M.Next(); return errors.Is(err, ErrNameTaken) }, 3*time.Second, 2*time.Millisecond, "M learns of the take-over")
	close(releaseN)
	// N stops at one of its next polls (a bound of seconds, not of polls:
	// the machine may be busy); with the take-over lost from the record
	// it would issue for good.
	var errN error
	assert.Eventually(t, func() bool { _, errN = N.Next(); return errors.Is(errN, ErrNameTaken) }, 10*time.Second, 2*time.Millisecond,
		"N still issues after M learned of the take-over: %v", errN)
	_, errH := H.Next()
	t.Logf("H (whose own Touch hangs, so it does not poll): %v", errH)
	J, err := Open(path, "web_1", WithRegistry(reg), WithSync(false), WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"}), WithHeartbeat(hb), WithCloneWindow(0))
	if err == nil {
		J.Close()
	}
	assert.ErrorIs(t, err, ErrNameTaken, "a new process joined the claim the host knew was taken over")
}

// A take-over learned by an extension rather than a refresh stops every
// process of the host too: the others stop issuing within two of their
// polls, not an interval and a half later.
func TestHeartbeatTakeoverLearnedByExtendShared(t *testing.T) {
	const interval = 10 * time.Second
	reg := registrytest.NewRegistry()
	fh := newFakeHost(t, nil)
	dir := t.TempDir()
	path := filepath.Join(dir, "a", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(path), 0o755))
	opts := []Option{WithHeartbeat(interval), WithCloneWindow(0), WithReserveStep(1 << 20)}
	A := fh.open(path, "web_1", reg, opts...)
	defer fh.close(A)
	fh.until(interval/4, 8, A.ExportHeartbeatHolder, "the first process never took the heartbeat role")
	B := fh.open(path, "web_1", reg, opts...)
	defer fh.close(B)
	other := filepath.Join(dir, "b", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(other), 0o755))
	// Take over just after the host's refresh: the test does not depend on
	// where in the interval it falls.
	calls := logCalls(reg)
	n := calls.count("touch")
	fh.until(interval/4, 12, func() bool { return calls.count("touch") > n }, "the host did not refresh")
	taker, err := Open(other, "web_1", WithRegistry(reg), WithHostInfo(HostInfo{Hostname: "h2", MachineID: "m2"}), WithBindingDir(t.TempDir()), WithTakeover(0), WithSync(false), WithCloneWindow(0))
	require.NoError(t, err)
	defer taker.Close()
	mark, _, err := ReadMark(path)
	require.NoError(t, err)
	require.ErrorIs(t, A.ExportExtend(context.Background(), mark+1), ErrNameTaken)
	_, err = A.Next()
	require.ErrorIs(t, err, ErrNameTaken)
	fh.step(interval / 4) // two of B's polls
	fh.step(interval / 4)
	_, err = B.Next()
	assert.ErrorIs(t, err, ErrNameTaken, "B still issues two polls after A learned of the take-over")
}
