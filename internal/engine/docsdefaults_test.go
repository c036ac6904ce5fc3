package engine

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/snapid/snapid/internal/claim"
	"github.com/snapid/snapid/internal/docdefaults"
	"github.com/snapid/snapid/internal/retry"
)

// TestDocsDefaults compares the library's rows of docs/reference/defaults.md
// (the one table every doc quoting a default links to) with the defaults
// the code uses: the option defaults of a Generator, and the exported
// constants (a Sequence's options default to them: see internal/sequence).
func TestDocsDefaults(t *testing.T) {
	t.Parallel()
	o := defaultOptions()
	onOff := map[bool]string{true: "on", false: "off"}
	docdefaults.Check(t, filepath.Join("..", "..", docdefaults.Path), "lib.", map[string]string{
		"lib.sync":             onOff[o.sync],
		"lib.file-mode":        fmt.Sprintf("%04o", uint32(o.fileMode)),
		"lib.reserve-step":     docdefaults.Count(o.reg.step, "numbers"),
		"lib.step-growth":      fmt.Sprintf("%d-fold", claim.MaxStepGrowth),
		"lib.outage-horizon":   docdefaults.Duration(o.reg.horizon),
		"lib.heartbeat":        docdefaults.Duration(o.reg.heartbeat),
		"lib.clone-window":     docdefaults.Duration(o.reg.cloneWindow),
		"lib.registry-timeout": docdefaults.Duration(o.reg.timeout),
		"lib.retry-waits": fmt.Sprintf("%s to %s, at most %d times",
			docdefaults.Short(retry.Base), docdefaults.Short(retry.Cap), retry.Attempts),
		"lib.sequence-block": docdefaults.Count(DefaultSequenceBlock, "numbers"),
		"lib.sequence-lease": docdefaults.Count(DefaultSequenceLease, "numbers"),
	})
	// The exported constants are what the options default to.
	if o.reg.step != DefaultReserveStep || o.reg.horizon != DefaultOutageHorizon {
		t.Errorf("defaultOptions: step %d, horizon %v; want DefaultReserveStep %d, DefaultOutageHorizon %v",
			o.reg.step, o.reg.horizon, DefaultReserveStep, DefaultOutageHorizon)
	}
}
