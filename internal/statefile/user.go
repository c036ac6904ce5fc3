package statefile

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// UserName returns the login name of uid from the system's user
// database, or "uid N" (also when the database does not answer within
// lookupWait: it names users in messages, which must not hang).
func UserName(uid uint32) string {
	ctx, cancel := context.WithTimeout(context.Background(), lookupWait)
	defer cancel()
	if u, ok := ByUID(ctx, uid); ok {
		return u.Name
	}
	return "uid " + strconv.FormatUint(uint64(uid), 10)
}

// lookupWait bounds a lookup of one user for a message.
const lookupWait = 2 * time.Second

// User is an entry of the system's user database.
type User struct {
	Name string
	Uid  uint32
	Home string
}

// userDB says where the users come from: passwd, when set, is a file in
// the format of /etc/passwd read instead of the system's user database;
// getent is the program that lists that database (getent passwd:
// /etc/passwd and whatever else NSS is configured with, LDAP, SSSD,
// systemd-homed; where it cannot be run, /etc/passwd is read). Tests
// change them (SetUserDatabase) while reads left running by a caller
// whose context ended may still use them: they are read under a lock.
var userDB = struct {
	sync.Mutex
	passwd, getent string
}{getent: "getent"}

// SetUserDatabase makes the users come from the file passwd (in the
// format of /etc/passwd) if it is not empty, else from the program getent
// run as `getent passwd [key]` (empty: "getent"), and returns how to
// restore what was before. For tests.
func SetUserDatabase(passwd, getent string) (restore func()) {
	if getent == "" {
		getent = "getent"
	}
	userDB.Lock()
	oldPasswd, oldGetent := userDB.passwd, userDB.getent
	userDB.passwd, userDB.getent = passwd, getent
	userDB.Unlock()
	return func() {
		userDB.Lock()
		userDB.passwd, userDB.getent = oldPasswd, oldGetent
		userDB.Unlock()
	}
}

// userDBConfig returns userDB's fields.
func userDBConfig() (passwd, getent string) {
	userDB.Lock()
	defer userDB.Unlock()
	return userDB.passwd, userDB.getent
}

// UsersContext returns the entries of the system's user database as
// `getent passwd` lists them, ending when ctx does (a directory service
// that does not answer does not hold the caller). A database that cannot
// be read, or that does not answer before ctx ends, is an error, never
// "no users": there is no variant without a context. A database that NSS does
// not enumerate (SSSD with enumerate = false, its default) lists only the
// users it has cached or that are local.
func UsersContext(ctx context.Context) ([]User, error) {
	return lookupUsers(ctx)
}

// ByUID returns the entry of uid in the system's user database: from
// /etc/passwd (or the file SetUserDatabase gave) if it is there, without running anything,
// else from getent passwd, which ends when ctx does.
func ByUID(ctx context.Context, uid uint32) (User, bool) {
	find := func(us []User) (User, bool) {
		for _, u := range us {
			if u.Uid == uid {
				return u, true
			}
		}
		return User{}, false
	}
	passwd, _ := userDBConfig()
	local := passwd
	if local == "" {
		local = "/etc/passwd"
	}
	us, _ := readPasswd(local)
	if u, ok := find(us); ok || passwd != "" {
		return u, ok
	}
	us, _ = lookupUsers(ctx, strconv.FormatUint(uint64(uid), 10))
	return find(us)
}

// lookupUsers lists the entries named by keys (login names or uids), or
// every entry if there are none.
func lookupUsers(ctx context.Context, keys ...string) ([]User, error) {
	passwd, getent := userDBConfig()
	if passwd != "" {
		return readPasswd(passwd)
	}
	cmd := exec.CommandContext(ctx, getent, append([]string{"passwd"}, keys...)...)
	cmd.Env = []string{"PATH=/usr/bin:/bin:/usr/sbin:/sbin", "LC_ALL=C"}
	cmd.WaitDelay = time.Second // a child it left holding the output does not hold us
	out, err := cmd.Output()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return parsePasswd(bufio.NewReader(bytes.NewReader(out))), nil
	case ctx.Err() != nil:
		return nil, fmt.Errorf("listing the users of the host (getent passwd): %w", ctx.Err())
	case errors.As(err, &exit) && exit.ExitCode() == 2 && len(keys) > 0:
		return nil, nil // a key not found (listing them all, it is a failure)
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		return readPasswd("/etc/passwd")
	}
	return nil, fmt.Errorf("listing the users of the host (getent passwd): %w", err)
}

// readPasswd reads a file in the format of /etc/passwd.
func readPasswd(path string) ([]User, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parsePasswd(bufio.NewReader(f)), nil // no limit on a line's length: a long one must not hide the rest
}

func parsePasswd(r *bufio.Reader) []User {
	var us []User
	for {
		line, err := r.ReadString('\n')
		if line == "" && err != nil {
			break
		}
		fields := strings.Split(strings.TrimSuffix(line, "\n"), ":")
		if len(fields) < 7 {
			continue
		}
		uid, err := strconv.ParseUint(fields[2], 10, 32)
		if err != nil {
			continue
		}
		us = append(us, User{Name: fields[0], Uid: uint32(uid), Home: fields[5]})
	}
	return us
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

// ReadSmallOwnedOrRoot is ReadSmallOwned that also reads a file of root's.
func ReadSmallOwnedOrRoot(path string, follow bool) ([]byte, int64, error) {
	return readSmallChecked(unix.AT_FDCWD, path, follow, nil, func(st unix.Stat_t) error {
		if st.Uid == 0 {
			return nil
		}
		return CheckOwner(path, st)
	})
}

// CheckDirOwner checks the directories leading to the counter at path,
// so that no other user can swap the counter, or the directory it is in,
// for another one under the same path:
//
//   - every directory above the counter's own must belong to root or to
//     the effective user and must not be writable by group or others
//     unless it is sticky (as /tmp is: its entries can then be renamed
//     only by their owners, who are checked in turn);
//   - a symbolic link on the way is followed only if it lies in such a
//     directory (and, in a sticky one, belongs to root or the effective
//     user itself);
//   - the counter's own directory must belong to the effective user, to
//     root, or to the owner of the counter file already there (a
//     service's own directory, which must not itself lie in a sticky
//     directory others can write, where any user can make one), and must
//     not be writable by group or others unless it is sticky.
//
// Anything else is refused with ErrWrongOwner or ErrUnsafeDir naming the
// directory and its owner. The walk is by path: only the users it trusts
// can change what it checked. A directory that does not exist is left for
// the caller to report.
func CheckDirOwner(path string) error { return checkDirs(path, false) }

// CheckDirsForInit is CheckDirOwner for an administrator making a
// counter to give to a service user (admin.Init): the counter's own
// directory may belong to any user (the service), but every directory
// above it is checked as CheckDirOwner checks it, so that no other user
// can lead the new file somewhere else.
func CheckDirsForInit(path string) error { return checkDirs(path, true) }

func checkDirs(path string, anyLeafOwner bool) error {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs // the walk starts at /
	}
	euid := uint32(os.Geteuid())
	dir, dst, err := walkTrusted(filepath.Dir(path), euid)
	if err != nil || dir == "" {
		return err
	}
	if dst.Uid != euid && dst.Uid != 0 && !anyLeafOwner {
		var lst unix.Stat_t
		if unix.Lstat(filepath.Join(dir, filepath.Base(path)), &lst) != nil || lst.Uid != dst.Uid {
			return fmt.Errorf("%w: the directory %s belongs to %s, who could replace what %s keeps in it; "+
				"keep the counter in a directory owned by %s, or give the counter to %s (snapctl init --owner)",
				ErrWrongOwner, dir, UserName(dst.Uid), UserName(euid), trustedOwners(euid), UserName(dst.Uid))
		}
	}
	if writableByOthers(dst) && !sticky(dst) {
		return fmt.Errorf("%w: the directory %s (mode %#o) can be written by users other than its owner %s, who could remove or replace the counter; "+
			"make it writable only by its owner (chmod go-w %s) or keep the counter elsewhere",
			ErrUnsafeDir, dir, dst.Mode&0o7777, UserName(dst.Uid), dir)
	}
	return nil
}

// trustedOwners names the owners a counter's directories may have for
// the user euid: "root or <user>", or "root" once when the user is root.
func trustedOwners(euid uint32) string {
	if euid == 0 {
		return "root"
	}
	return "root or " + UserName(euid)
}

// maxLinks bounds the symbolic links walkTrusted follows (as the
// kernel's limit on one lookup).
const maxLinks = 40

// walkTrusted resolves the absolute directory path from /, one level at
// a time, checking every directory it passes through above the last (see
// CheckDirOwner), and returns the resolved path of the last one and its
// status. It returns "" and no error when a level does not exist or is
// not a directory (the caller's open reports that).
func walkTrusted(path string, euid uint32) (string, unix.Stat_t, error) {
	w := &trustWalk{path: path, euid: euid, cur: "/"}
	if err := unix.Lstat("/", &w.st); err != nil {
		return "", w.st, nil
	}
	w.pending = strings.Split(path, "/")
	for len(w.pending) > 0 {
		name := w.pending[0]
		w.pending = w.pending[1:]
		if more, err := w.step(name); !more {
			return "", w.st, err
		}
	}
	return w.cur, w.st, nil
}

// trustWalk is the state of walkTrusted: the directory reached and its
// status, the names still to resolve, and the links followed so far.
type trustWalk struct {
	path    string // the path walked, named by the error of too many links
	euid    uint32
	cur     string
	st      unix.Stat_t
	pending []string
	links   int
}

// ok reports whether the owner u is trusted: root or the effective user.
func (w *trustWalk) ok(u uint32) bool { return u == 0 || u == w.euid }

// step resolves name under w.cur: it goes up for "..", follows a link,
// and goes down into a directory. It returns false when the walk stops,
// with w.st the status walkTrusted returns: with no error when a level
// does not exist or is not a directory, with an error when a level is not
// trusted.
func (w *trustWalk) step(name string) (bool, error) {
	switch name {
	case "", ".":
		return true, nil
	case "..":
		w.cur = filepath.Dir(w.cur)
		return unix.Lstat(w.cur, &w.st) == nil, nil
	}
	// cur is passed through: its entries must be safe from others.
	if err := w.checkPassage(); err != nil {
		return false, err
	}
	inSticky := writableByOthers(w.st)
	next := filepath.Join(w.cur, name)
	var lst unix.Stat_t
	if err := unix.Lstat(next, &lst); err != nil {
		w.st = lst
		return false, nil
	}
	if inSticky && !w.ok(lst.Uid) {
		w.st = lst
		return false, fmt.Errorf("%w: %s belongs to %s and lies in the sticky directory %s; keep the counter under directories owned by %s",
			ErrWrongOwner, next, UserName(lst.Uid), w.cur, trustedOwners(w.euid))
	}
	if lst.Mode&unix.S_IFMT == unix.S_IFLNK {
		return w.follow(next, lst)
	}
	w.st = lst
	if lst.Mode&unix.S_IFMT != unix.S_IFDIR {
		return false, nil
	}
	w.cur = next
	return true, nil
}

// checkPassage refuses w.cur as a directory to pass through unless it
// belongs to a trusted owner and, if others can write it, is sticky.
func (w *trustWalk) checkPassage() error {
	if !w.ok(w.st.Uid) {
		return fmt.Errorf("%w: %s belongs to %s, who could replace the directories below it; keep the counter under directories owned by %s",
			ErrWrongOwner, w.cur, UserName(w.st.Uid), trustedOwners(w.euid))
	}
	if writableByOthers(w.st) && !sticky(w.st) {
		return fmt.Errorf("%w: %s (mode %#o) can be written by users other than its owner, who could replace the directories below it",
			ErrUnsafeDir, w.cur, w.st.Mode&0o7777)
	}
	return nil
}

// follow puts the target of the link next (whose status is lst) in front
// of the names still to resolve, restarting from / if the target is
// absolute. Like step, it returns false when the walk stops: past
// maxLinks links (an error), or when the link cannot be read or / cannot
// be read (no error).
func (w *trustWalk) follow(next string, lst unix.Stat_t) (bool, error) {
	if w.links++; w.links > maxLinks {
		w.st = lst
		return false, &fs.PathError{Op: "open", Path: w.path, Err: unix.ELOOP}
	}
	target, err := os.Readlink(next)
	if err != nil {
		w.st = lst
		return false, nil
	}
	if filepath.IsAbs(target) {
		w.cur = "/"
		if err := unix.Lstat(w.cur, &w.st); err != nil {
			return false, nil
		}
	}
	w.pending = append(strings.Split(target, "/"), w.pending...)
	return true, nil
}

// CheckLink checks a counter path that is to be followed if it is a
// symbolic link (snapid.Config.FollowSymlinks): a link is followed only if no
// other user could have made or replaced it, that is if the directory
// holding it passes CheckDirOwner's checks for a directory passed
// through (root's or the effective user's, not writable by others unless
// sticky, and then the link itself root's or the user's). Its target is
// then checked as a counter path in turn (directories and links), up to
// maxLinks links. A path that is not a link is left to CheckDirOwner.
func CheckLink(path string) error {
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	euid := uint32(os.Geteuid())
	for range maxLinks {
		var lst unix.Stat_t
		if err := unix.Lstat(path, &lst); err != nil || lst.Mode&unix.S_IFMT != unix.S_IFLNK {
			return nil
		}
		dir, dst, err := walkTrusted(filepath.Dir(path), euid)
		if err != nil || dir == "" {
			return err
		}
		if !linkTrusted(dst, lst, euid) {
			return fmt.Errorf("%w: %s is a symbolic link in %s (owned by %s, mode %#o), which another user could have made; "+
				"links are followed only in directories that belong to root or %s and that no other user can write",
				ErrWrongOwner, path, dir, UserName(dst.Uid), dst.Mode&0o7777, UserName(euid))
		}
		target, err := os.Readlink(path)
		if err != nil {
			return nil
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(dir, target)
		}
		if err := CheckDirOwner(target); err != nil {
			return err
		}
		path = target
	}
	return &fs.PathError{Op: "open", Path: path, Err: unix.ELOOP}
}

// linkTrusted reports whether no user but root and euid could have made
// or replaced a link whose status is lst in a directory whose status is
// dst: the directory belongs to root or euid, and either no other user
// can write it, or it is sticky and the link belongs to root or euid.
func linkTrusted(dst, lst unix.Stat_t, euid uint32) bool {
	return (dst.Uid == 0 || dst.Uid == euid) && (!writableByOthers(dst) || (sticky(dst) && (lst.Uid == 0 || lst.Uid == euid)))
}
