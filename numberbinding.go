package snapid

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/snapid/snapid/internal/statefile"
	"golang.org/x/sys/unix"
)

// Node number bindings: without a registry a node number is configured
// (WithNodeNumber), and two names under one number would hand out the
// same numeric ids (n.1 from each). So Open without a registry records,
// beside the name bindings (see DefaultBindingDir), which name each node
// number goes with: <dir>/<number> (decimal digits: never a node name,
// which starts with a letter or "_"), holding the line "snapid-number 1"
// and the name, each ending in a newline. It refuses the number under
// another name while that name's binding leads to a counter file that
// exists (ErrNumberBound); a number whose name is no longer in use on the
// host is taken over. It is read and written like a name binding (the
// same trust rules, under the same lock), and checked across the
// host-wide and users' directories as names are.

const numberBindingHeader = "snapid-number 1"

// numberFile is the name of node number n's binding file.
func numberFile(n uint64) string { return strconv.FormatUint(n, 10) }

// parseNumberBinding returns the node name a number binding holds and,
// for a number a registry gave (a third line, the counter's absolute path
// quoted as a Go string), the counter ("" otherwise).
func parseNumberBinding(b []byte) (name, counter string, ok bool) {
	header, rest, ok := strings.Cut(string(b), "\n")
	if !ok || header != numberBindingHeader {
		return "", "", false
	}
	name, tail, ok := strings.Cut(rest, "\n")
	if !ok || ValidateName(name) != nil {
		return "", "", false
	}
	if tail != "" {
		q, end, ok := strings.Cut(tail, "\n")
		c, err := strconv.Unquote(q)
		if !ok || end != "" || err != nil || !filepath.IsAbs(c) {
			return "", "", false
		}
		counter = c
	}
	return name, counter, true
}

// nameInUse reports whether name's binding in dir (owned by one of
// owners: root's own or this user's, never another user's, which
// userNumber judges) leads to a counter file that exists, and which. A
// binding that cannot be read or parsed may be in use: an operator must
// look.
func nameInUse(dir *statefile.Dir, name string, owners []uint32) (string, bool) {
	b, _, err := dir.ReadFile(name, owners...)
	if err != nil {
		return "", false
	}
	bound, ok := parseBinding(b)
	if !ok {
		return "", true
	}
	var st unix.Stat_t
	if err := unix.Lstat(bound, &st); errors.Is(err, unix.ENOENT) {
		return bound, false
	}
	return bound, true
}

// readNumberBinding reads the binding of node number n in dir and judges
// it for name: an error when another name that is in use on the host
// goes with it, or when it cannot be read. A file owned by a user not in
// owners is ignored. Nothing here follows a link or blocks.
func readNumberBinding(dir *statefile.Dir, n uint64, name string, owners []uint32, o *options) (bindingState, error) {
	file := numberFile(n)
	path := filepath.Join(dir.Path(), file)
	b, st, err := dir.ReadFile(file, owners...)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return bindingNone, nil
	case errors.Is(err, statefile.ErrWrongOwner):
		o.logger.Warn("snapid: a node number binding not owned by a user it can be trusted from is ignored",
			"binding", path, "owner", statefile.UserName(st.Uid))
		return bindingUntrusted, nil
	case errors.Is(err, statefile.ErrSymlink), errors.Is(err, statefile.ErrNotRegular), errors.Is(err, statefile.ErrTooLarge):
		return 0, &FileError{Op: "bind", Path: path, Err: fmt.Errorf("%w: %w; check which node name this host uses node number %d with, then remove it (the next Open records the binding again)", ErrCorruptBinding, err, n)}
	case err != nil:
		return 0, &FileError{Op: "bind", Path: path, Err: err}
	}
	bound, counter, ok := parseNumberBinding(b)
	if !ok {
		return 0, &FileError{Op: "bind", Path: path, Err: fmt.Errorf("%w: it does not hold a node number binding this version writes; check which node name this host uses node number %d with, then remove it (the next Open records the binding again)", ErrCorruptBinding, n)}
	}
	if bound == name {
		return bindingOurs, nil
	}
	if counter != "" {
		// A number a registry gave: the name's for good, cluster-wide,
		// whether its counter is on this host now or not.
		return 0, &FileError{Op: "bind", Path: path, Err: fmt.Errorf(
			"%w: a registry gave node number %d to the node name %q (bound on this host with the counter %s), and never gives it to another name: two names under one number hand out the same numeric ids; "+
				"use another number (if %q is retired for good on the whole cluster, remove %s)", ErrNumberBound, n, bound, counter, bound, path)}
	}
	counter, inUse := nameInUse(dir, bound, owners)
	if !inUse {
		return bindingStale, nil
	}
	with := "the counter " + counter
	if counter == "" {
		with = "a name binding that cannot be read (" + filepath.Join(dir.Path(), bound) + ")"
	}
	return 0, &FileError{Op: "bind", Path: path, Err: fmt.Errorf(
		"%w: this host uses node number %d with the node name %q (%s; recorded in %s), and two names under one number hand out the same numeric ids; "+
			"use another number, or, if %q is retired, remove %s", ErrNumberBound, n, bound, with, path, bound, path)}
}

// bindNumber records, holding the lock of dir, that node number n goes
// with name, and returns how to take that back if the Open fails. A stale
// binding replaced is put back then.
func bindNumber(ctx context.Context, dir *statefile.Dir, n uint64, name, counter string, owners []uint32, hostWide bool, checkOnly string, o *options) (undo func(), err error) {
	nothing := func() {}
	if checkOnly != "" {
		if err := checkHostWideNumber(checkOnly, n, name, o); err != nil {
			return nothing, err
		}
	}
	st, err := readNumberBinding(dir, n, name, owners, o)
	if err != nil {
		return nothing, err
	}
	if hostWide {
		// Also when the binding is root's already (see withNameBound).
		if err := checkUsersNumber(ctx, n, name, filepath.Join(dir.Path(), numberFile(n)), o); err != nil {
			return nothing, err
		}
	}
	file := numberFile(n)
	path := filepath.Join(dir.Path(), file)
	if st == bindingOurs {
		if err := dir.Sync(); err != nil {
			return nothing, &FileError{Op: "bind", Path: path, Err: fmt.Errorf("sync directory %s: %w", dir.Path(), err)}
		}
		return nothing, nil
	}
	var stale []byte
	if st == bindingStale {
		stale, _, _ = dir.ReadFile(file, owners...)
	}
	undo = func() {
		if stale != nil {
			_ = dir.Replace(file, stale, 0o644)
		} else {
			_ = dir.Remove(file)
		}
	}
	b := []byte(numberBindingHeader + "\n" + name + "\n")
	if counter != "" {
		b = append(b, strconv.Quote(counter)+"\n"...)
	}
	if st == bindingNone {
		err = dir.Create(file, b, 0o644)
	} else {
		err = dir.Replace(file, b, 0o644)
	}
	if err != nil {
		if now, rerr := readNumberBinding(dir, n, name, owners, o); rerr == nil && now == bindingOurs {
			undo()
		}
		return nothing, &FileError{Op: "bind", Path: path, Err: err}
	}
	// Root and a user bind under different locks: each checks the
	// other's bindings again after recording its own, so that of two
	// such Opens at least one sees the other and fails.
	switch {
	case hostWide:
		err = checkUsersNumber(ctx, n, name, filepath.Join(dir.Path(), numberFile(n)), o)
	case checkOnly != "":
		err = checkHostWideNumber(checkOnly, n, name, o)
	}
	if err != nil {
		undo()
		return nothing, err
	}
	if st == bindingStale {
		o.logger.Warn("snapid: the node name this node number went with on this host is no longer in use; the number now goes with this name",
			"number", n, "name", name, "binding", path)
	}
	return undo, nil
}

// checkHostWideNumber refuses, for a user, a node number root bound in
// the host-wide directory at path to another name, in use or not: root
// may not have made that name's counter yet, and only root takes over its
// stale bindings.
func checkHostWideNumber(path string, n uint64, name string, o *options) error {
	dir, err := statefile.OpenDir(path, statefile.DirOptions{Owners: []uint32{0}, AllowSticky: true})
	if err != nil {
		return nil // as checkHostWide: none, unreadable, or not safe to read
	}
	defer dir.Close()
	st, err := readNumberBinding(dir, n, name, []uint32{0}, o)
	if err == nil && st == bindingStale {
		// Root's binding of the number to another name, whose counter is
		// not in sight: root's Open may not have made it yet, or it is
		// out of sight for a while. Only root takes it over.
		b, _, _ := dir.ReadFile(numberFile(n), 0)
		bound, _, _ := parseNumberBinding(b)
		p := filepath.Join(path, numberFile(n))
		err = &FileError{Op: "bind", Path: p, Err: fmt.Errorf(
			"%w: root bound node number %d on this host to the node name %q (in %s), whose counter is not in sight (being opened, or out of sight for a while); "+
				"use another number, or, if %q is retired, have root remove %s", ErrNumberBound, n, bound, p, bound, p)}
	}
	return err
}

// checkUsersNumber refuses, for root binding node number n host-wide to
// name, a number a user of this host uses under another name: bound in
// the user's own directory to a name of the user's that goes with a
// counter file of that user's (see userNumber). What root cannot read is
// an error; the scan ends with ctx (see eachUserDir).
func checkUsersNumber(ctx context.Context, n uint64, name, at string, o *options) error {
	what := fmt.Sprintf("the node number bindings of the host's users, which root must check before it uses node number %d", n)
	return eachUserDir(ctx, what, at, o, func(u statefile.User, dir *statefile.Dir) error {
		bound, counter, err := userNumber(dir, u, n)
		if err != nil || bound == "" || bound == name {
			return err
		}
		p := filepath.Join(dir.Path(), numberFile(n))
		return &FileError{Op: "bind", Path: p, Err: fmt.Errorf(
			"%w: the user %s uses node number %d with its node name %q and its counter %s (recorded in %s), and two names under one number hand out the same numeric ids; "+
				"use another number, or have that user retire %q and remove %s", ErrNumberBound, u.Name, n, bound, counter, p, bound, p)}
	})
}

// userNumber returns the node name the user u uses node number n with,
// and that name's counter, as u's bindings in dir say: the name n's
// binding holds, if it goes with a counter file of u's (a regular file of
// CounterSize bytes owned by u: see userCounter), through the counter a
// registry's binding names or through the name's own binding. Anything
// else blocks nothing ("" and no error): no binding, one not owned by u,
// one that cannot be parsed, a name without a counter of u's. A binding
// root cannot read (EACCES, an I/O error) is an error.
func userNumber(dir *statefile.Dir, u statefile.User, n uint64) (name, counter string, err error) {
	b, ok, err := readUserFile(dir, u, numberFile(n))
	if !ok {
		return "", "", err
	}
	name, regCounter, ok := parseNumberBinding(b)
	if !ok {
		return "", "", nil
	}
	if regCounter != "" && userCounter(regCounter, u.Uid) == counterPresent {
		return name, regCounter, nil
	}
	b, ok, err = readUserFile(dir, u, name)
	if !ok {
		return "", "", err
	}
	bound, ok := parseBinding(b)
	if !ok || userCounter(bound, u.Uid) != counterPresent {
		return "", "", nil
	}
	return name, bound, nil
}

// readUserFile reads the binding file name of the user u in dir, for
// root: ok is false, with no error, when there is none that counts (no
// file, or not a regular file of u's), and with an error when root cannot
// read it.
func readUserFile(dir *statefile.Dir, u statefile.User, name string) ([]byte, bool, error) {
	b, _, err := dir.ReadFile(name, u.Uid)
	switch {
	case err == nil:
		return b, true, nil
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, statefile.ErrWrongOwner), errors.Is(err, statefile.ErrSymlink),
		errors.Is(err, statefile.ErrNotRegular), errors.Is(err, statefile.ErrTooLarge), errors.Is(err, unix.ENOTDIR):
		return nil, false, nil
	}
	p := filepath.Join(dir.Path(), name)
	return nil, false, &FileError{Op: "bind", Path: p, Err: fmt.Errorf(
		"root cannot read %s, a binding of the user %s (%w), so it cannot tell whether that user uses it; "+
			"run as root with CAP_DAC_READ_SEARCH, or have that user make it readable, or remove it if that user does not use it", p, u.Name, err)}
}

// checkUsersStride refuses, for root recording the host's stride, another
// stride a user of this host issues striped ids with: recorded in the
// user's own directory while one of that user's node number bindings
// there goes with a counter file of that user's (see userNumber). A
// user's stride file without such a counter, or one that cannot be
// parsed, blocks nothing.
func checkUsersStride(ctx context.Context, stride uint64, at string, o *options) error {
	what := fmt.Sprintf("the strides of the host's users, which root must check before it uses stride %d", stride)
	return eachUserDir(ctx, what, at, o, func(u statefile.User, dir *statefile.Dir) error {
		b, ok, err := readUserFile(dir, u, strideFile)
		if !ok {
			return err
		}
		s, ok := parseStride(b)
		if !ok || s == stride {
			return nil
		}
		names, err := dir.Names()
		if err != nil {
			return unreadableUserDir(u, dir.Path(), err)
		}
		for _, f := range names {
			n, perr := strconv.ParseUint(f, 10, 64)
			if perr != nil || numberFile(n) != f {
				continue
			}
			name, counter, err := userNumber(dir, u, n)
			if err != nil {
				return err
			}
			if name == "" {
				continue
			}
			p := filepath.Join(dir.Path(), strideFile)
			return &FileError{Op: "bind", Path: p, Err: fmt.Errorf(
				"%w: the user %s issues striped ids on this host with stride %d, not %d (recorded in %s; node number %d, node name %q, counter %s): ids of two strides meet; "+
					"use %d (the stride belongs to the cluster), or have that user retire that counter and remove %s",
				ErrStrideMismatch, u.Name, s, stride, p, n, name, counter, s, p)}
		}
		return nil
	})
}

// checkHostWideStride refuses, for a user recording its stride, another
// stride root recorded in the host-wide directory at path.
func checkHostWideStride(path string, stride uint64) error {
	hw, err := statefile.OpenDir(path, statefile.DirOptions{Owners: []uint32{0}, AllowSticky: true})
	if err != nil {
		return nil // as checkHostWide: none, unreadable, or not safe to read
	}
	s, ok, err := readStride(hw, []uint32{0})
	hw.Close()
	switch {
	case err != nil:
		return err
	case ok && s != stride:
		return strideMismatch(filepath.Join(path, strideFile), s, stride)
	}
	return nil
}

// otherRealmStride checks the stride against the directories this Open
// cannot write: the users' for root, root's for a user.
func otherRealmStride(ctx context.Context, dir *statefile.Dir, stride uint64, hostWide bool, checkOnly string, o *options) error {
	switch {
	case hostWide:
		return checkUsersStride(ctx, stride, filepath.Join(dir.Path(), strideFile), o)
	case checkOnly != "":
		return checkHostWideStride(checkOnly, stride)
	}
	return nil
}

// The host's stride without a registry: <dir>/.stride (never a node name
// or a number) holds "snapid-stride 1" and the stride, each ending in a
// newline. The first striped Open of the host records it; another stride
// is refused (ErrStrideMismatch), since ids of two strides meet (1×10+1 =
// 2×5+1). Across hosts, keeping one stride is the operator's part, as
// keeping numbers apart is.
const strideFile = ".stride"

// bindStride records or checks the host's stride in dir, holding its
// lock; a program of another user also checks the host-wide one.
//
// Root and a user record strides under different locks: each checks the
// other's again after recording its own, as for numbers.
func bindStride(ctx context.Context, dir *statefile.Dir, stride uint64, owners []uint32, hostWide bool, checkOnly string, o *options) (undo func(), err error) {
	nothing := func() {}
	if err := otherRealmStride(ctx, dir, stride, hostWide, checkOnly, o); err != nil {
		return nothing, err
	}
	s, ok, err := readStride(dir, owners)
	switch {
	case err != nil:
		return nothing, err
	case ok && s != stride:
		return nothing, strideMismatch(filepath.Join(dir.Path(), strideFile), s, stride)
	case ok:
		return nothing, nil
	}
	if err := dir.Create(strideFile, fmt.Appendf(nil, "snapid-stride 1\n%d\n", stride), 0o644); err != nil {
		return nothing, &FileError{Op: "bind", Path: filepath.Join(dir.Path(), strideFile), Err: err}
	}
	undo = func() { _ = dir.Remove(strideFile) }
	if err := otherRealmStride(ctx, dir, stride, hostWide, checkOnly, o); err != nil {
		undo()
		return nothing, err
	}
	return undo, nil
}

func strideMismatch(path string, recorded, given uint64) error {
	return &FileError{Op: "bind", Path: path, Err: fmt.Errorf(
		"%w: this host's striped ids use stride %d, not %d: ids of two strides meet; use %d (the stride belongs to the cluster)", ErrStrideMismatch, recorded, given, recorded)}
}

// readStride reads the host's stride file in dir; ok is false if there
// is none (or only one of a user not in owners).
func readStride(dir *statefile.Dir, owners []uint32) (uint64, bool, error) {
	path := filepath.Join(dir.Path(), strideFile)
	b, _, err := dir.ReadFile(strideFile, owners...)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, statefile.ErrWrongOwner):
		return 0, false, nil
	case err != nil:
		return 0, false, &FileError{Op: "bind", Path: path, Err: fmt.Errorf("%w: %w", ErrCorruptBinding, err)}
	}
	v, ok := parseStride(b)
	if !ok {
		return 0, false, &FileError{Op: "bind", Path: path, Err: fmt.Errorf("%w: not a stride file this version writes; remove it if no striped ids are handed out on this host", ErrCorruptBinding)}
	}
	return v, true, nil
}

// parseStride returns the stride a stride file holds.
func parseStride(b []byte) (uint64, bool) {
	rest, ok := strings.CutPrefix(string(b), "snapid-stride 1\n")
	v, err := strconv.ParseUint(strings.TrimSuffix(rest, "\n"), 10, 64)
	if !ok || !strings.HasSuffix(rest, "\n") || err != nil || checkStride(v) != nil {
		return 0, false
	}
	return v, true
}

// precheckNumberBinding refuses, before anything is made, a node number
// bound on this host to another name (see readNumberBinding and
// checkHostWideNumber).
func precheckNumberBinding(dir *statefile.Dir, name string, owners []uint32, checkOnly string, o *options) error {
	if _, err := readNumberBinding(dir, o.form.node, name, owners, o); err != nil {
		return err
	}
	if checkOnly != "" {
		return checkHostWideNumber(checkOnly, o.form.node, name, o)
	}
	return nil
}

// openNumberBound, holding the lock of dir, binds the configured node
// number (and, striped, the host's stride) to name, then runs open; if
// open fails, the bindings it made are taken back.
func openNumberBound(ctx context.Context, dir *statefile.Dir, name string, owners []uint32, hostWide bool, checkOnly string, o *options, open func() error) error {
	undo, err := bindNumber(ctx, dir, o.form.node, name, "", owners, hostWide, checkOnly, o)
	if err != nil {
		return err
	}
	undoStride := func() {}
	if o.form.form == FormatStriped {
		if undoStride, err = bindStride(ctx, dir, o.form.stride, owners, hostWide, checkOnly, o); err != nil {
			undo()
			return err
		}
	}
	if err := open(); err != nil {
		undoStride()
		undo()
		return err
	}
	if checkOnly != "" {
		// A user checks root's binding again once its counter exists:
		// root judges the user's binding by that counter, so of two such
		// Opens at least one sees the other (see checkHostWideNumber).
		if err := checkHostWideNumber(checkOnly, o.form.node, name, o); err != nil {
			undoStride()
			undo()
			return err
		}
	}
	return nil
}

// bindRegistryNumber records, for the first process of a host whose
// registry gave name node number n, that n goes with name and its counter
// on this host (a number binding with the counter's path: the name's for
// good, never taken over by another name), so that an Open without a registry cannot take n
// for another name on this host (ErrNumberBound); a number this host
// already uses with another name is refused the same way. Waiting for the
// bindings' lock ends with ctx.
func bindRegistryNumber(ctx context.Context, name, counterPath string, n uint64, o *options) error {
	path, hostWide, checkOnly, err := o.bindingDirs(ctx, counterPath)
	switch {
	case err != nil:
		return &FileError{Op: "bind", Path: counterPath, Err: err}
	case path == "":
		return nil
	}
	owners := trustedOwners(hostWide)
	dir, err := openBindingDir(path, hostWide, owners, o)
	if err != nil {
		return err
	}
	defer dir.Close()
	lockFile, err := dir.OpenLockFile(bindingLock, 0o600, owners...)
	if err != nil {
		return &FileError{Op: "bind", Path: filepath.Join(path, bindingLock), Err: untrusted(err)}
	}
	defer lockFile.Close()
	if err := statefile.Lock(ctx, int(lockFile.Fd()), lockFile.Name()); err != nil {
		return &FileError{Op: "bind", Path: lockFile.Name(), Err: lockError(err)}
	}
	_, err = bindNumber(ctx, dir, n, name, counterPath, owners, hostWide, checkOnly, o)
	return err
}
