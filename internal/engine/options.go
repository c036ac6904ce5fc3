package engine

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/snapid/snapid/internal/claim"
	"github.com/snapid/snapid/internal/clock"
	"github.com/snapid/snapid/registry"
)

// An Option configures Open, Init, Repair and ReadCounter.
type Option func(*options) error

type options struct {
	sync           bool
	block          uint64
	cpuShards      bool
	fileMode       fs.FileMode
	binding        string // the place of the host's records of names, when bindingSet
	bindingSet     bool
	followSymlinks bool
	// initDir: Init, an administrator's step, may make a counter in a
	// directory of another user (a service's, to give it to that user);
	// Open refuses to.
	initDir bool
	// owner: Init and Repair give the counter file to this user and
	// group (WithOwner); nil leaves it as it is.
	owner  *fileOwner
	logger *slog.Logger
	// clock is every time reading, timer, ticker, sleep and context
	// deadline of the Generator (withClock; clock.Real by default). It is
	// per Generator: the simulator gives each simulated host its own.
	clock clock.Clock
	io    fileIO
	fs    fsOps
	reg   registryOptions
	form  formOptions
}

func defaultOptions() options {
	return options{
		sync:     true,
		fileMode: 0o600,
		logger:   slog.Default(),
		clock:    clock.Real{},
		io:       osIO{},
		fs:       osFS{},
		reg: registryOptions{
			step:        DefaultReserveStep,
			cloneWindow: 5 * time.Minute,
			heartbeat:   time.Minute,
			timeout:     15 * time.Second,
			horizon:     DefaultOutageHorizon,
		},
	}
}

func buildOptions(opts []Option) (options, error) {
	o := defaultOptions()
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return o, err
		}
	}
	o.reg.clock = o.clock
	if or := observerOf(o.reg.registry); or != nil {
		or.clock = o.clock
	}
	if o.reg.registry != nil {
		if err := o.reg.checkCloneWindow(); err != nil {
			return o, err
		}
	}
	return o, nil
}

// WithSync turns fdatasync after each counter update on (the default) or
// off. With sync on, a number is handed out only after the counter value
// covering it is on stable storage, so ids survive an OS crash or a power
// loss. With sync off the counter is synced only once a step of numbers,
// when the host's record of the name is written ahead of it: after a
// crash of the host the first start raises the counter to the record's
// mark, so a power loss leaves a gap of up to a step (1024), never a
// repeat; sequences' leases are not covered so (they need sync on).
func WithSync(on bool) Option {
	return func(o *options) error {
		o.sync = on
		return nil
	}
}

// WithBlock turns on block mode: the Generator reserves n numbers at a time
// with one locked (and synced) update and serves them from memory. Numbers
// then increase per process, not host-wide, and a process that exits or
// crashes leaves the rest of its block unused (a gap, never a repeat).
// The next block is reserved in the background when half of the current one
// is used. n must be 1 to MaxBlock.
func WithBlock(n uint64) Option {
	return func(o *options) error {
		if err := CheckBlock(n); err != nil {
			return fmt.Errorf("snapid: %w: WithBlock(%d): %v", ErrInvalidOption, n, err)
		}
		o.block = n
		return nil
	}
}

// MaxBlock is the largest block (WithBlock) and MaxReserveStep the largest
// step (WithReserveStep): a crash skips the rest of a block or a step, so
// at these bounds a counter still outlives 2^31 crashes, where a block or
// a step of 2^64-1 would use it up at once.
const (
	MaxBlock       = 1 << 32
	MaxReserveStep = 1 << 32
)

// CheckBlock says why n cannot be a block's size (nil: it can).
func CheckBlock(n uint64) error {
	switch {
	case n == 0:
		return errors.New("a block holds at least 1 number")
	case n > MaxBlock:
		return fmt.Errorf("a block holds at most %d numbers (a crash skips the rest of a block)", uint64(MaxBlock))
	}
	return nil
}

// CheckReserveStep says why n cannot be a reservation step (nil: it can).
func CheckReserveStep(n uint64) error {
	switch {
	case n < 2:
		return errors.New("a step holds at least 2 numbers")
	case n > MaxReserveStep:
		return fmt.Errorf("a step holds at most %d numbers (a crash skips the rest of a step)", uint64(MaxReserveStep))
	}
	return nil
}

// WithCPUShards, in block mode, serves numbers from small per-CPU runs
// taken from the block, so that throughput grows with the number of cores
// instead of every caller updating one shared counter. The price: numbers
// are still unique, but no longer increase within the process (callers on
// different cores interleave), and a few more are skipped (a run the
// runtime drops at a garbage collection, or left at Close, is a gap). It
// has no effect without WithBlock.
func WithCPUShards(on bool) Option {
	return func(o *options) error {
		o.cpuShards = on
		return nil
	}
}

// WithFileMode sets the permission bits of a counter file the call creates,
// and of the files beside it (default 0600). It has no effect on an
// existing file. The owner must be able to read and write (0600 at
// least): a mode without them is refused, since the library could not
// use its own file.
func WithFileMode(mode fs.FileMode) Option {
	return func(o *options) error {
		if mode&^fs.ModePerm != 0 {
			return fmt.Errorf("snapid: %w: WithFileMode(%v): only permission bits are allowed", ErrInvalidOption, mode)
		}
		if mode&0o600 != 0o600 {
			return fmt.Errorf("snapid: %w: WithFileMode(%#o): the owner needs read and write permission (0600) to use the file", ErrInvalidOption, uint32(mode))
		}
		o.fileMode = mode
		return nil
	}
}

// fileOwner is a user and a group id; -1 leaves one unchanged.
type fileOwner struct{ uid, gid int }

// WithOwner makes Init and Repair give the counter file to the user uid
// and the group gid (-1 leaves one unchanged; changing the user needs
// root): an administrator running as root makes the counter of a service
// that runs as another user. The file is given through the descriptor
// Init or Repair opened, checked and locked, right after checking again
// on that descriptor that it is a regular file with one name whose owner
// is trusted (see Init), never by path: a user who can rename entries in
// the counter's directory cannot have another file (a hard link to a file
// of root's) given away in its place. Open and ReadCounter refuse it
// (ErrInvalidOption).
func WithOwner(uid, gid int) Option {
	return func(o *options) error {
		if uid < -1 || gid < -1 || int64(uid) > maxOwnerID || int64(gid) > maxOwnerID || (uid == -1 && gid == -1) {
			return fmt.Errorf("snapid: %w: WithOwner(%d, %d): want a user and a group id from 0 to %d, or -1 to leave one unchanged, not both", ErrInvalidOption, uid, gid, maxOwnerID)
		}
		o.owner = &fileOwner{uid, gid}
		return nil
	}
}

// maxOwnerID is the largest user or group id (2^32-1 means "unchanged").
const maxOwnerID int64 = 1<<32 - 2

// refuseOwner refuses WithOwner for a call other than Init and Repair.
func (o *options) refuseOwner(call string) error {
	if o.owner == nil {
		return nil
	}
	return fmt.Errorf("snapid: %w: WithOwner is for Init and Repair, not %s", ErrInvalidOption, call)
}

// WithFollowSymlinks lets the counter path be a symbolic link. By default a
// symbolic link at the counter path is refused with ErrSymlink, so that a
// link planted there cannot redirect writes to another file.
func WithFollowSymlinks(on bool) Option {
	return func(o *options) error {
		o.followSymlinks = on
		return nil
	}
}

// WithLogger sets the logger for notices (a counter raised to the
// registry's mark, a background reservation that failed, a name binding
// moved). The default is slog.Default() as it is when Open is called, so
// that these notices reach the program's log unless it chooses otherwise;
// pass slog.New(slog.DiscardHandler) to silence them.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) error {
		if l == nil {
			return fmt.Errorf("snapid: %w: WithLogger(nil)", ErrInvalidOption)
		}
		o.logger = l
		return nil
	}
}

// withIO replaces the counter file's I/O (tests inject faults with it).
func withIO(io fileIO) Option {
	return func(o *options) error {
		o.io = io
		return nil
	}
}

// withFS replaces the file-system work of creating files (tests record
// its order and inject faults with it).
func withFS(fsys fsOps) Option {
	return func(o *options) error {
		o.fs = fsys
		return nil
	}
}

// Registry options. They only matter with WithRegistry.
type registryOptions struct {
	numbers     registry.NumberRegistry // registry, if it gives node numbers (its calls are not counted)
	registry    registry.Registry
	step        uint64
	host        HostInfo
	hostSet     bool
	takeover    bool
	floor       uint64
	reclaim     bool
	cloneWindow time.Duration
	heartbeat   time.Duration
	timeout     time.Duration
	horizon     time.Duration
	clock       clock.Clock                     // options.clock, copied by buildOptions
	retryWait   func(attempt int) time.Duration // nil: retryBackoff
}

// claimOptions are the claim's settings under r.
func (r *registryOptions) claimOptions() claim.Options {
	return claim.Options{Step: r.step, Horizon: r.horizon, Heartbeat: r.heartbeat, Timeout: r.timeout, CloneWindow: r.cloneWindow,
		Takeover: r.takeover, Floor: r.floor, Host: r.host, HostSet: r.hostSet, Clock: r.clock, RetryWait: r.retryWait}
}

// checkCloneWindow refuses a clone window in which a live holder that
// misses one heartbeat, the next one late by up to a registry timeout,
// would look gone: the window must be at least twice the heartbeat plus
// the registry timeout (or 0: no clone check). Written so that no sum can
// overflow.
func (r *registryOptions) checkCloneWindow() error {
	w, hb, to := r.cloneWindow, r.heartbeat, r.timeout
	if w == 0 || (w > to && hb <= (w-to)/2) {
		return nil
	}
	return fmt.Errorf("snapid: %w: the clone window (%v) must be at least twice the heartbeat (%v) plus the registry timeout (%v), "+
		"so that a live holder missing one heartbeat does not look gone; raise the clone window, lower the heartbeat, or turn the check off",
		ErrInvalidOption, w, hb, to)
}

// DefaultReserveStep is the least number of numbers a host reserves in the
// registry at a time unless WithReserveStep says otherwise; at higher rates
// a step grows to cover DefaultOutageHorizon (see WithOutageHorizon). A
// crash leaves a gap of at most one step: at most this many numbers on a
// host that issues fewer per horizon, so that short ids stay short.
const DefaultReserveStep = 1_000

// WithRegistry makes Open claim the node name in r before it issues
// anything, and bounds issuance by the registry's reserved-up-to mark.
// Without it the Generator is standalone: the name is not checked against
// other hosts.
func WithRegistry(r registry.Registry) Option {
	return func(o *options) error {
		if r == nil {
			return fmt.Errorf("snapid: %w: WithRegistry(nil)", ErrInvalidOption)
		}
		// Each Open gets its own count of the calls (Generator.Stats).
		o.reg.registry = observe(r)
		o.reg.numbers, _ = r.(registry.NumberRegistry)
		return nil
	}
}

// DefaultOutageHorizon is how long a registry outage the reserved range
// is sized to bridge, at the rate ids are being issued, unless
// WithOutageHorizon says otherwise.
const DefaultOutageHorizon = 2 * time.Hour

// WithOutageHorizon sizes each reservation step to at least what the host
// issued in the last d (default DefaultOutageHorizon; counted over d, not
// extrapolated from a shorter burst), so that a
// registry outage of about d/2 (the next step is reserved when half of the
// current one is used) does not stop issuance, whatever the rate. A crash
// skips at most one step, so a longer horizon means larger gaps after a
// crash at high rates.
func WithOutageHorizon(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("snapid: %w: WithOutageHorizon(%v)", ErrInvalidOption, d)
		}
		o.reg.horizon = d
		return nil
	}
}

// withClock replaces the Generator's clock: every time it reads, every
// timer, ticker and sleep, every context deadline it creates (tests and
// the simulator; nil means the real clock).
func withClock(c clock.Clock) Option {
	return func(o *options) error {
		o.clock = clock.OrReal(c)
		return nil
	}
}

// WithReserveStep sets the least number of numbers the host reserves in
// the registry at a time (default DefaultReserveStep; more at high rates,
// see WithOutageHorizon). The next step is reserved in the background when
// half of the current one is used. n must be 2 to MaxReserveStep.
func WithReserveStep(n uint64) Option {
	return func(o *options) error {
		if err := CheckReserveStep(n); err != nil {
			return fmt.Errorf("snapid: %w: WithReserveStep(%d): %v", ErrInvalidOption, n, err)
		}
		o.reg.step = n
		return nil
	}
}

// WithHostInfo sets how this machine is described in the registry (default
// LocalHostInfo()).
func WithHostInfo(h HostInfo) Option {
	return func(o *options) error {
		o.reg.host, o.reg.hostSet = h, true
		return nil
	}
}

// WithTakeover lets Open take the name over from an active holder of
// another owner, which is only right when that holder is known to be gone
// for good. The counter starts above floor and above the old holder's
// reserved mark. A floor of MaxNumber leaves no number to issue (the
// name would be exhausted for every later host) and is refused with
// ErrInvalidOption.
func WithTakeover(floor uint64) Option {
	return func(o *options) error {
		if floor == MaxNumber {
			return fmt.Errorf("snapid: %w: WithTakeover(%d): the floor leaves no number to issue (the highest floor is %d, which leaves one)",
				ErrInvalidOption, floor, uint64(MaxNumber-1))
		}
		o.reg.takeover, o.reg.floor = true, floor
		return nil
	}
}

// WithBindingDir names the place of the host's records of node names for
// this Open (default: see DefaultBindingDir): an absolute path, created
// (mode 0700) if missing. Every program of a host must name the same
// place to protect the others. There is no turning the records off: a
// program that simulates several hosts on one machine (a test) gives
// each host a place of its own (a directory under t.TempDir()).
func WithBindingDir(dir string) Option {
	return func(o *options) error {
		if dir == "" {
			return fmt.Errorf("snapid: %w: WithBindingDir(\"\"): name a directory; every Open keeps the host's record of its name, "+
				"and there is no turning that off: a test, or each host it simulates, uses a place of its own (a directory under t.TempDir())", ErrInvalidOption)
		}
		if err := CheckBindingDir(dir); err != nil {
			return fmt.Errorf("snapid: %w: WithBindingDir(%q): %w", ErrInvalidOption, dir, err)
		}
		o.binding, o.bindingSet = dir, true
		return nil
	}
}

// WithReclaim lets Open claim a name that this host released before
// (Release, snapctl release); without it, Open refuses such a name with
// ErrReleased. snapctl register uses it.
func WithReclaim() Option {
	return func(o *options) error {
		o.reg.reclaim = true
		return nil
	}
}

// WithCloneWindow sets how recently a holder must have been seen for a
// claim with its owner token from another machine to be refused as a
// probable clone (default 5 minutes). With a registry, Open refuses a
// window shorter than twice the heartbeat plus the registry timeout (see
// WithHeartbeat, WithRegistryTimeout), so that one lost heartbeat does not
// make a live holder look gone; 0 turns the check off. Every host should use
// the same heartbeat and window: the window is the claimant's, the
// heartbeat the holder's. The check compares the claimant's clock with the
// holder's last heartbeat, which can be an interval and seven eighths plus
// the registry timeout old while the holder runs: a claimant whose clock is
// ahead of the holder's by the window less that (2 min 52.5 s with the
// defaults, an eighth of the heartbeat at the smallest window) can take a
// live host's name. Keep the hosts' clocks within that (NTP does;
// `snapctl check-names` reports rows ahead of its clock).
func WithCloneWindow(d time.Duration) Option {
	return func(o *options) error {
		if d < 0 {
			return fmt.Errorf("snapid: %w: WithCloneWindow(%v)", ErrInvalidOption, d)
		}
		o.reg.cloneWindow = d
		return nil
	}
}

// WithHeartbeat sets how often the host refreshes its claim's last-seen
// time in the registry (default 1 minute): one process of the host does
// it for all of them, and another takes over at its next poll (a quarter
// of the interval) when it exits or crashes (see package claim). The clone window
// must be at least twice the heartbeat plus the registry timeout (see
// WithCloneWindow). Give the host's processes one interval.
func WithHeartbeat(d time.Duration) Option {
	return positiveDuration("WithHeartbeat", d, func(o *options) { o.reg.heartbeat = d })
}

// WithRegistryTimeout bounds each registry call the Generator makes on its
// own (extensions, heartbeats, the return of the reservation at Close);
// default 15 seconds.
func WithRegistryTimeout(d time.Duration) Option {
	return positiveDuration("WithRegistryTimeout", d, func(o *options) { o.reg.timeout = d })
}

// positiveDuration is an option named name that refuses a d that is not
// positive, and otherwise sets it.
func positiveDuration(name string, d time.Duration, set func(*options)) Option {
	return func(o *options) error {
		if d <= 0 {
			return fmt.Errorf("snapid: %w: %s(%v)", ErrInvalidOption, name, d)
		}
		set(o)
		return nil
	}
}

// CheckBindingDirFor says why dir cannot hold the records of the counter
// at counterPath (both absolute): it is the counter's own path, under it,
// or one of the files kept beside it (<counter>.owner, .mark, .session,
// .presence, .heartbeat, .seq.<sequence>…), where the place of records
// would be made in a file's stead before the counter is opened.
func CheckBindingDirFor(counterPath, dir string) error {
	c, d := filepath.Clean(counterPath), filepath.Clean(dir)
	rest, ok := strings.CutPrefix(d, c)
	if !ok || rest != "" && rest[0] != '/' && rest[0] != '.' {
		return nil
	}
	side, _, _ := strings.Cut(rest, "/")
	switch {
	case rest == "", rest[0] == '/':
		return fmt.Errorf("is the counter's path %s, or under it", c)
	case slices.Contains(sideSuffixes, side), strings.HasPrefix(side, leaseSuffix):
		return fmt.Errorf("is %s%s, a file kept beside the counter", c, side)
	}
	return nil
}

// checkRecordsBeside refuses, as ErrInvalidOption, a place of records
// given (WithBindingDir, SNAPID_BINDING_DIR) that CheckBindingDirFor
// refuses for the counter at counterPath.
func checkRecordsBeside(counterPath string, o *options) error {
	dir, what := o.binding, "WithBindingDir"
	if !o.bindingSet {
		dir, what = os.Getenv("SNAPID_BINDING_DIR"), "SNAPID_BINDING_DIR"
	}
	if dir == "" {
		return nil
	}
	if err := CheckBindingDirFor(counterPath, dir); err != nil {
		return fmt.Errorf("snapid: %w: %s %q %v: the host's records of names need a directory of their own", ErrInvalidOption, what, dir, err)
	}
	return nil
}

// sideSuffixes are the suffixes of the files kept beside a counter (and
// those of earlier versions, which an Open takes in).
var sideSuffixes = []string{ownerSuffix, markSuffix, presenceSuffix, sessionSuffix, claim.HeartbeatSuffix,
	formsSuffix, formsCopySuffix, numberSuffix, releasedSuffix}

// CheckBindingDir checks a directory given for name bindings (by
// WithBindingDir or SNAPID_BINDING_DIR): an absolute path, and not the
// filesystem root (the bindings and their lock would be written among the
// system's top-level directories). The error says what is wrong, for the
// caller to name where the value came from.
func CheckBindingDir(dir string) error {
	if !filepath.IsAbs(dir) {
		return errors.New("must be an absolute path")
	}
	if filepath.Clean(dir) == "/" {
		return errors.New("must be a directory of its own, not the filesystem root")
	}
	return nil
}

// claimFiles is how the claim's files beside the counter are opened and
// made under o.
func (o *options) claimFiles() claim.FileOptions {
	return claim.FileOptions{Follow: o.followSymlinks, Mode: o.fileMode, FS: o.fs, Clock: o.clock}
}
