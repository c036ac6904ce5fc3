package snapid_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	. "github.com/snapid/snapid"
	"github.com/snapid/snapid/internal/statefile"
	"github.com/snapid/snapid/internal/testfs"
	"github.com/stretchr/testify/require"
)

// userWithNumberAndGetent sets up nobody with a counter of its own under the
// name x, bound to node number 5 in its own bindings directory (as a
// decimal Open of nobody's leaves them: it issued 5.1..5.3), and a user
// database (a getent) that answers its first call and then does what
// later runs.
func userWithNumberAndGetent(t *testing.T, prefix, later string, answered int) (root string) {
	root, home := hostWithNobody(t, prefix)
	zero := EncodeCounter(3)
	require.NoError(t, os.WriteFile(filepath.Join(root, "zero"), zero[:], 0o644))
	userCounter := filepath.Join(home, "c.u64")
	names := filepath.Join(home, ".local", "state", "snapid", "names")
	testfs.AsOtherUser(t, "mkdir -p "+names+" && chmod 700 "+filepath.Join(home, ".local", "state", "snapid")+" "+names+
		" && cp "+filepath.Join(root, "zero")+" "+userCounter+
		" && printf 'snapid-binding 1\\n\"%s\"\\n' "+userCounter+" > "+filepath.Join(names, "x")+
		" && printf 'snapid-number 1\\nx\\n' > "+filepath.Join(names, "5"))
	getent := filepath.Join(root, "getent")
	calls := filepath.Join(root, "calls")
	script := fmt.Sprintf(`#!/bin/sh
echo "$@" >> %[1]s
if [ "$(wc -l < %[1]s)" -gt %[4]d ]; then %[2]s; fi
cat %[3]s
`, calls, later, filepath.Join(root, "passwd"), answered)
	require.NoError(t, os.WriteFile(getent, []byte(script), 0o755))
	t.Cleanup(statefile.SetUserDatabase("", getent))
	return root
}

// getentAnswered is how many getent calls of root's Open come before its
// first check of the users' node number bindings.
const getentAnswered = 2

// Root's checks of the users' node number (and stride) bindings list the
// users with the caller's context and read a failure as an error, never
// as "no users": a user database that answers root's name check and fails
// the next call (a directory service going away, NSS errors) makes root's
// Open with node number 5, which a user of the host issues decimal ids
// under, fail, instead of both handing out 5.4.
func TestNumberBindingUserDBFailureRefuses(t *testing.T) {
	requireRoot(t)
	root := userWithNumberAndGetent(t, "snapid-userdbnum-", "exit 1", getentAnswered)
	rootCounter := filepath.Join(root, "rootc", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(rootCounter), 0o700))
	g, err := Open(rootCounter, "a", WithSync(false), WithFormat(FormatDecimal), WithNodeNumber(5))
	calls, _ := os.ReadFile(filepath.Join(root, "calls"))
	t.Logf("getent calls: %q", calls)
	if err != nil {
		t.Logf("refused: %v", err)
		require.Contains(t, err.Error(), "getent passwd", "the error says the user database failed")
		require.NotErrorIs(t, err, ErrNumberBound)
		return
	}
	defer g.Close()
	id, err := g.UniqueID()
	require.NoError(t, err)
	t.Fatalf("root took node number 5, which nobody uses with its counter (it issued 5.1..5.3): root issued %s", id)
}

// The same, the user database hanging on the second call: an
// OpenContext with a 3 s deadline returns at its deadline, with the
// context's error.
func TestNumberBindingUserDBHangEndsWithContext(t *testing.T) {
	requireRoot(t)
	root := userWithNumberAndGetent(t, "snapid-userdbhang-", "exec sleep 10", getentAnswered)
	rootCounter := filepath.Join(root, "rootc", "c.u64")
	require.NoError(t, os.Mkdir(filepath.Dir(rootCounter), 0o700))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		g, err := OpenContext(ctx, rootCounter, "a", WithSync(false), WithFormat(FormatDecimal), WithNodeNumber(7))
		if err == nil {
			g.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		t.Logf("returned after %v: %v", time.Since(start), err)
		require.Less(t, time.Since(start), 8*time.Second)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	case <-time.After(8 * time.Second):
		<-done // each getent call of root's ends after 10 s
		t.Fatalf("OpenContext with a 3 s deadline returned only after %v", time.Since(start))
	}
}
