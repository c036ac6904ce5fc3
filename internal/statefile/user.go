package statefile

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// UserName returns the login name of uid from /etc/passwd, or "uid N".
func UserName(uid uint32) string {
	f, err := os.Open("/etc/passwd")
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Split(sc.Text(), ":")
			if len(fields) > 2 && fields[2] == strconv.FormatUint(uint64(uid), 10) {
				return fields[0]
			}
		}
	}
	return "uid " + strconv.FormatUint(uint64(uid), 10)
}

// CheckOwner applies the rule for a counter and every file beside it: the
// file, whose status st was taken on its opened descriptor, is trusted only
// if the effective user owns it, or if it belongs to the owner of the
// directory holding it and that directory is not writable by group or
// others (so root may use a service user's counter in the service's own
// 0750 directory). Anything else could have been planted or rewritten by
// another user (in a sticky directory such as /tmp, say) and is refused
// with ErrWrongOwner naming the owner.
func CheckOwner(path string, st unix.Stat_t) error {
	euid := uint32(os.Geteuid())
	if st.Uid == euid {
		return nil
	}
	dir := filepath.Dir(path)
	var dst unix.Stat_t
	if err := unix.Stat(dir, &dst); err == nil && dst.Uid == st.Uid && !writableByOthers(dst) {
		return nil
	}
	return fmt.Errorf("%w: %s belongs to %s, who is neither the user running this (%s) nor the owner of %s with it writable only by its owner; "+
		"remove the file if %s should not hold this state, or keep the state in a directory that user owns and no one else can write",
		ErrWrongOwner, path, UserName(st.Uid), UserName(euid), dir, UserName(st.Uid))
}

// ReadSmallOwned is ReadSmall (following no link unless follow) for a
// file beside a counter: the file is also checked with CheckOwner on its
// opened descriptor before anything is read from it.
func ReadSmallOwned(path string, follow bool) ([]byte, int64, error) {
	return readSmallChecked(unix.AT_FDCWD, path, follow, nil, func(st unix.Stat_t) error { return CheckOwner(path, st) })
}

// CheckDirOwner checks the directory holding the counter at path: it must
// belong to the effective user, to root, or to the owner of the counter
// file already there (a service's own directory). A directory another
// user owns is refused with ErrWrongOwner naming that user: that user
// could rename or replace what root keeps in it.
func CheckDirOwner(path string) error {
	euid := uint32(os.Geteuid())
	dir := filepath.Dir(path)
	var dst unix.Stat_t
	if err := unix.Stat(dir, &dst); err != nil {
		return nil // a missing directory is reported by the caller
	}
	if dst.Uid == euid || dst.Uid == 0 {
		return nil
	}
	var lst unix.Stat_t
	if unix.Lstat(path, &lst) == nil && lst.Uid == dst.Uid {
		return nil
	}
	return fmt.Errorf("%w: the directory %s belongs to %s, who could replace what %s keeps in it; "+
		"keep the counter in a directory owned by %s or root, or give the counter to %s (snapctl init --owner)",
		ErrWrongOwner, dir, UserName(dst.Uid), UserName(euid), UserName(euid), UserName(dst.Uid))
}
