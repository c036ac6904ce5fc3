package snapid_test

import (
	"context"
	"sync"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/registry/registrytest"
	"github.com/stretchr/testify/require"
)

// The host's last process holds the host's gate from the moment it finds
// itself last until it has set the name's mark back and recorded where
// the host's sequence leases stand: a process starting meanwhile waits at
// the gate (and then claims anew), never joins the closing claim, whose
// leases the registry now records as closed at their position (a copy of
// a lease file made there would be carried over by the next claim and
// repeat what the joiner took).
func TestCloseHoldsTheGateUntilTheMarkIsSetBack(t *testing.T) {
	reg := registrytest.NewRegistry()
	_, path := ctPath(t)
	g := openReg(t, path, "web_1", reg)
	_, err := g.UniqueID()
	require.NoError(t, err)

	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	reg.SetHook(func(_ context.Context, op, _ string) error {
		if op == "get" {
			once.Do(func() {
				close(held)
				<-release
			})
		}
		return nil
	})
	closed := make(chan error, 1)
	go func() { closed <- g.Close() }()
	<-held // the last process is about to set the mark back

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = OpenContext(ctx, path, "web_1", WithRegistry(reg), WithSync(false), WithHostInfo(HostInfo{Hostname: "h1", MachineID: "m1"}))
	require.ErrorIs(t, err, ErrLocked, "an Open while the last process closes must wait at the host's gate")
	require.ErrorContains(t, err, "finish starting or closing")

	close(release)
	require.NoError(t, <-closed)
	reg.SetHook(nil)
	g2 := openReg(t, path, "web_1", reg)
	defer g2.Close()
	_, err = g2.UniqueID()
	require.NoError(t, err)
}
