package snapid

import (
	"cmp"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"time"

	"github.com/snapid/snapid/internal/engine"
	"github.com/snapid/snapid/registry"
)

// Config says how Open opens a Generator. Its zero value is the default:
// ids in the name form ("<name>-<number>"), numbers issued host-wide in
// strictly increasing order with an fdatasync before each is handed out,
// no registry (the name is checked on this host only), and the host's
// records of names in the default place (see BindingDir).
//
// Each part holds only what means something together: a node number is
// given only with a numeric Form, CPU shards only with a Block, the
// registry's timings only with a Registry.
type Config struct {
	// Form is the form of the ids UniqueID and NextID hand out: nil for
	// the name form, Decimal or Striped for the numeric forms.
	Form Form

	// Registry, when set, makes Open claim the node name in a registry
	// shared by the cluster before it issues anything, and bounds
	// issuance by the registry's reserved-up-to mark. Without it the
	// Generator is standalone: the name is not checked against other
	// hosts.
	Registry *RegistryConfig

	// Block, when set, turns on block mode: numbers are reserved a block
	// at a time and served from memory, increasing per Generator instead
	// of host-wide.
	Block *Block

	// NoSync turns off the fdatasync after each counter update. With sync
	// on (the default) a number is handed out only after the counter
	// value covering it is on stable storage, so ids survive an OS crash
	// or a power loss. With sync off the counter is synced only once a
	// step of numbers, when the host's record of the name is written
	// ahead of it: after a crash of the host the first start raises the
	// counter to the record's mark, so a power loss leaves a gap of up
	// to a step (1024), never a repeat. Sequences' leases are not
	// covered so: they need sync on.
	NoSync bool

	// BindingDir is the place of the host's records of node names: an
	// absolute path, created (mode 0700) if missing. "" is the default:
	// $SNAPID_BINDING_DIR if set, else /var/lib/snapid/records, made by
	// root's first Open (mode 1777 under a root-owned /var/lib/snapid:
	// every user adds its own records, and only a record's owner, or
	// root, can remove or replace it); on a host where root has not made
	// it yet, a user's records are kept in its own state directory
	// (~/.local/state/snapid/records) and moved into the place by its
	// first Open after root made it. Every program of a host must use the
	// same place to protect the others. There is no turning the records
	// off: a program that simulates several hosts on one machine (a test)
	// gives each host a place of its own (a directory under t.TempDir()).
	BindingDir string

	// FileMode is the permission bits of a counter file Open creates,
	// and of the files beside it; 0 is 0600. It has no effect on an
	// existing file. The owner must be able to read and write.
	FileMode fs.FileMode

	// FollowSymlinks lets the counter path be a symbolic link. By
	// default a symbolic link there is refused with ErrUntrusted, so that
	// a link planted there cannot redirect writes to another file.
	FollowSymlinks bool

	// Logger receives the notices (a counter raised to the registry's
	// mark, a background reservation that failed, a record of a name
	// moved). nil is slog.Default() as it is when Open is called; give
	// slog.New(slog.DiscardHandler) to silence them.
	Logger *slog.Logger
}

// Form is a numeric form of the ids: Decimal or Striped. A nil Form is the
// name form, "<name>-<number>".
type Form interface {
	options() []engine.Option
}

// Decimal is the form "<node number>.<number>": ids of every node are
// distinct as decimal fractions, so they sort as numbers do across a
// cluster. Numbers ending in 0 are skipped (1.50 would equal 1.5), Next
// skips them too, and NextN is refused (its range would hold some):
// NextIDsContext takes n decimal ids with one counter update.
type Decimal struct {
	// NodeNumber is the node number the ids carry, 1 to
	// registry.MaxNodeNumber. 0 takes the registry's (a
	// registry.NumberRegistry); without a registry it must be given, and
	// the host's records of names refuse one number under two names.
	// With a registry, a number other than the registry's is refused
	// (ErrNumberMismatch).
	NodeNumber uint64
	// MaxID is the largest number handed out; past it every call returns
	// ErrExhausted. 0 is 2^64-1.
	MaxID uint64
}

// Striped is the form of one integer, number × stride + node number: the
// nodes' ids interleave and fit a 64-bit integer column
// (Generator.UniqueUint64).
type Striped struct {
	// NodeNumber is as Decimal's, 1 to the stride less one.
	NodeNumber uint64
	// Stride is the cluster's stride, 2 to registry.MaxNodeNumber+1.
	// Every host of a cluster must use the same one. 0 takes the
	// registry's (NumberRegistry.SetStride); with a registry, another one
	// is refused (ErrStrideMismatch).
	Stride uint64
	// MaxID is the largest integer handed out; past it every call
	// returns ErrExhausted, nothing ever overflows. 0 is math.MaxInt64;
	// MaxSafeInteger suits JavaScript, math.MaxUint32 32 bits.
	MaxID uint64
}

func (d Decimal) options() []engine.Option {
	return formOptions(FormatDecimal, d.NodeNumber, 0, d.MaxID)
}

func (s Striped) options() []engine.Option {
	return formOptions(FormatStriped, s.NodeNumber, s.Stride, s.MaxID)
}

// formOptions are the engine's options for a numeric form; zero values
// are left to the engine's defaults.
func formOptions(f Format, node, stride, maxID uint64) []engine.Option {
	opts := []engine.Option{engine.WithFormat(f)}
	if node != 0 {
		opts = append(opts, engine.WithNodeNumber(node))
	}
	if stride != 0 {
		opts = append(opts, engine.WithStride(stride))
	}
	if maxID != 0 {
		opts = append(opts, engine.WithMaxID(maxID))
	}
	return opts
}

// RegistryConfig is how a Generator uses its registry. Only Registry is
// needed; each zero value is the default.
type RegistryConfig struct {
	// Registry is where names are claimed (package cassandra's, or
	// registry/registrytest's in tests).
	Registry registry.Registry

	// Host is how this machine is described in the registry. A field
	// left empty is this machine's: its host name, a non-loopback
	// address, its machine id (/etc/machine-id or
	// /var/lib/dbus/machine-id, else "host:" and the host name).
	Host HostInfo

	// ReserveStep is the least count of numbers the host reserves in the
	// registry at a time (0: 1,000; more at high rates, see
	// OutageHorizon; at most 2^32, as a crash skips the rest of a step).
	// The next step is reserved in the background when half of the
	// current one is used.
	ReserveStep uint64

	// OutageHorizon sizes each reservation step to at least what the
	// host issued in the last OutageHorizon (0: 2 hours), so that a
	// registry outage of about half of it does not stop issuance,
	// whatever the rate. A crash skips at most one step, so a longer
	// horizon means larger gaps after a crash at high rates. A negative
	// value turns the sizing off: every step is ReserveStep.
	OutageHorizon time.Duration

	// Heartbeat is how often the host refreshes its claim's last-seen
	// time in the registry (0: 1 minute): one process of the host does
	// it for all of them, and another takes over at its next poll (a
	// quarter of the interval) when it exits or crashes. Give the host's
	// processes one interval. At least 100 milliseconds: more often only
	// loads the registry.
	Heartbeat time.Duration

	// Timeout bounds each registry call the Generator makes on its own:
	// extensions, heartbeats, the return of the reservation at Close
	// (0: 15 seconds); and Open's claim, with its start on this host,
	// when Open's context has no deadline. At least 100 milliseconds: a
	// registry call takes milliseconds, tens across data centres.
	Timeout time.Duration

	// CloneWindow is how recently a holder must have been seen for a
	// claim with its owner token from another machine to be refused as a
	// probable clone (0: 5 minutes; negative: no such check). Open
	// refuses a window shorter than twice the heartbeat plus the
	// timeout, so that one lost heartbeat does not make a live holder
	// look gone. Every host should use the same heartbeat and window.
	// The check compares the claimant's clock with the holder's last
	// heartbeat, which can be an interval and seven eighths plus the
	// timeout old while the holder runs: a claimant whose clock is ahead
	// of the holder's by the window less that (2 min 52.5 s with the
	// defaults) can take a live host's name. Keep the hosts' clocks
	// within that (NTP does; `snapctl check-names` reports rows ahead of
	// its clock).
	CloneWindow time.Duration

	// Reclaim lets Open claim a name that this host released before
	// (admin.Release, snapctl release); without it, Open refuses such a
	// name with ErrReleased.
	Reclaim bool

	// Takeover, when set, lets Open take the name over from an active
	// holder of another owner, which is only right when that holder is
	// known to be gone for good.
	Takeover *Takeover
}

// Takeover is a name taken over from a holder gone for good: the counter
// starts above Floor and above the old holder's reserved mark. The Floor
// applies whether or not a holder is found (a name nobody holds is
// claimed, and its counter still starts above Floor). A Floor of 2^64-1
// leaves no number to issue and is refused.
type Takeover struct {
	Floor uint64
}

// Block is block mode: the Generator reserves Size numbers at a time with
// one locked (and synced) update and serves them from memory. Numbers then
// increase per Generator, not host-wide, and a process that exits or
// crashes leaves the rest of its block unused (a gap, never a repeat).
// The next block is reserved in the background when half of the current
// one is used.
type Block struct {
	// Size is how many numbers a block holds: 1 to 2^32 (a crash skips
	// the rest of a block, so a larger one could use the counter up).
	Size uint64

	// CPUShards serves numbers from small per-CPU runs taken from the
	// block, so that throughput grows with the number of cores instead
	// of every caller updating one shared counter. The price: numbers
	// are still unique, but no longer increase within the process
	// (callers on different cores interleave), and a few more are
	// skipped (a run the runtime drops at a garbage collection, or left
	// at Close, is a gap).
	CPUShards bool
}

// options checks c and turns it into the engine's options. A value that
// cannot be used is ErrInvalidOption naming the field.
func (c Config) options() ([]engine.Option, error) {
	invalid := func(field string, v any, why string) error {
		return fmt.Errorf("snapid: %w: Config.%s %v: %s", ErrInvalidOption, field, v, why)
	}
	opts := []engine.Option{engine.WithSync(!c.NoSync)}
	switch f := c.Form.(type) {
	case *Decimal:
		if f == nil {
			return nil, invalid("Form", "(*Decimal)(nil)", "give a Decimal, or leave Form nil for the name form")
		}
	case *Striped:
		if f == nil {
			return nil, invalid("Form", "(*Striped)(nil)", "give a Striped, or leave Form nil for the name form")
		}
	}
	if c.Form != nil {
		opts = append(opts, c.Form.options()...)
	}
	if b := c.Block; b != nil {
		if err := engine.CheckBlock(b.Size); err != nil {
			return nil, invalid("Block.Size", b.Size, err.Error())
		}
		opts = append(opts, engine.WithBlock(b.Size), engine.WithCPUShards(b.CPUShards))
	}
	if c.BindingDir != "" {
		if err := engine.CheckBindingDir(c.BindingDir); err != nil {
			return nil, invalid("BindingDir", fmt.Sprintf("%q", c.BindingDir), err.Error())
		}
		opts = append(opts, engine.WithBindingDir(c.BindingDir))
	}
	if c.FileMode != 0 {
		if c.FileMode&^fs.ModePerm != 0 || c.FileMode&0o600 != 0o600 {
			return nil, invalid("FileMode", fmt.Sprintf("%#o", uint32(c.FileMode)), "want permission bits that let the owner read and write (0600 at least)")
		}
		opts = append(opts, engine.WithFileMode(c.FileMode))
	}
	if c.FollowSymlinks {
		opts = append(opts, engine.WithFollowSymlinks(true))
	}
	if c.Logger != nil {
		opts = append(opts, engine.WithLogger(c.Logger))
	}
	if c.Registry != nil {
		ro, err := c.Registry.options(invalid)
		if err != nil {
			return nil, err
		}
		opts = append(opts, ro...)
	}
	return opts, nil
}

// options checks r and turns it into the engine's options.
func (r *RegistryConfig) options(invalid func(field string, v any, why string) error) ([]engine.Option, error) {
	if r.Registry == nil {
		return nil, invalid("Registry.Registry", nil, "name the registry, or leave Config.Registry nil to run without one")
	}
	opts := []engine.Option{engine.WithRegistry(r.Registry)}
	if r.Host != (HostInfo{}) {
		h, local := r.Host, engine.LocalHostInfo()
		h.Hostname = cmp.Or(h.Hostname, local.Hostname)
		h.Address = cmp.Or(h.Address, local.Address)
		if h.MachineID == "" && local.MachineID == "host:"+local.Hostname {
			// No machine id on this host: the fallback is the host
			// name's, the one given.
			local.MachineID = "host:" + h.Hostname
		}
		h.MachineID = cmp.Or(h.MachineID, local.MachineID)
		opts = append(opts, engine.WithHostInfo(h))
	}
	if r.ReserveStep != 0 {
		if err := engine.CheckReserveStep(r.ReserveStep); err != nil {
			return nil, invalid("Registry.ReserveStep", r.ReserveStep, err.Error())
		}
		opts = append(opts, engine.WithReserveStep(r.ReserveStep))
	}
	to, err := r.timingOptions(invalid)
	if err != nil {
		return nil, err
	}
	opts = append(opts, to...)
	if r.Reclaim {
		opts = append(opts, engine.WithReclaim())
	}
	if t := r.Takeover; t != nil {
		if t.Floor == math.MaxUint64 {
			return nil, invalid("Registry.Takeover.Floor", t.Floor, fmt.Sprintf("leaves no number to issue (the highest floor is %d, which leaves one)", uint64(math.MaxUint64-1)))
		}
		opts = append(opts, engine.WithTakeover(t.Floor))
	}
	return opts, nil
}

// timingOptions checks r's durations (OutageHorizon, Heartbeat, Timeout,
// CloneWindow) and turns those that are not zero into the engine's
// options, in that order.
func (r *RegistryConfig) timingOptions(invalid func(field string, v any, why string) error) ([]engine.Option, error) {
	var opts []engine.Option
	switch {
	case r.OutageHorizon < 0:
		opts = append(opts, engine.WithOutageHorizon(0))
	case r.OutageHorizon > 0:
		opts = append(opts, engine.WithOutageHorizon(r.OutageHorizon))
	}
	switch {
	case r.Heartbeat < 0:
		return nil, invalid("Registry.Heartbeat", r.Heartbeat, "want a positive interval, or 0 for the default")
	case r.Heartbeat > 0 && r.Heartbeat < 100*time.Millisecond:
		return nil, invalid("Registry.Heartbeat", r.Heartbeat, "want at least 100ms (more often only loads the registry), or 0 for the default")
	case r.Heartbeat > 0:
		opts = append(opts, engine.WithHeartbeat(r.Heartbeat))
	}
	switch {
	case r.Timeout < 0:
		return nil, invalid("Registry.Timeout", r.Timeout, "want a positive duration, or 0 for the default")
	case r.Timeout > 0 && r.Timeout < 100*time.Millisecond:
		return nil, invalid("Registry.Timeout", r.Timeout, "want at least 100ms (a registry call takes milliseconds, tens across data centres), or 0 for the default")
	case r.Timeout > 0:
		opts = append(opts, engine.WithRegistryTimeout(r.Timeout))
	}
	switch {
	case r.CloneWindow < 0:
		opts = append(opts, engine.WithCloneWindow(0))
	case r.CloneWindow > 0:
		opts = append(opts, engine.WithCloneWindow(r.CloneWindow))
	}
	return opts, nil
}
