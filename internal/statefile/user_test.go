package statefile

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// withGetent makes the user database a program running script, until the
// test ends.
func withGetent(t *testing.T, script string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "getent")
	require.NoError(t, os.WriteFile(p, []byte("#!/bin/sh\n"+script+"\n"), 0o755))
	t.Cleanup(SetUserDatabase("", p))
}

// The users come from the system's user database (getent passwd), which
// lists users /etc/passwd does not (LDAP, SSSD); a lookup of one uid
// finds them too.
func TestUsersFromUserDatabase(t *testing.T) {
	withGetent(t, `if [ "$2" = "" ] || [ "$2" = 4242 ]; then echo 'ldapuser:*:4242:4242:LDAP:/home/ldapuser:/bin/sh'; exit 0; fi; exit 2`)
	us, err := UsersContext(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []User{{Name: "ldapuser", Uid: 4242, Home: "/home/ldapuser"}}, us)
	u, ok := ByUID(context.Background(), 4242)
	require.True(t, ok)
	assert.Equal(t, "/home/ldapuser", u.Home)
	assert.Equal(t, "ldapuser", UserName(4242))
	assert.Equal(t, "uid 4343", UserName(4343), "a uid the database does not know")
}

// A user database that does not answer ends the listing when the
// caller's context does.
func TestUsersEndWithContext(t *testing.T) {
	withGetent(t, "exec sleep 60")
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := UsersContext(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 20*time.Second)
}

// A user database that fails (a directory service going away, NSS
// errors) is an error, never "no users": the whole listing, whatever its
// exit status.
func TestUsersDatabaseFailureIsError(t *testing.T) {
	for _, status := range []int{1, 2, 3} {
		withGetent(t, fmt.Sprintf("echo 'nobody:x:65534:65534:nobody:/nonexistent:/bin/sh'; exit %d", status))
		us, err := UsersContext(context.Background())
		require.Error(t, err, "getent passwd exiting %d", status)
		assert.Contains(t, err.Error(), "getent passwd")
		assert.Nil(t, us)
	}
}
