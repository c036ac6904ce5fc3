package registry_test

import (
	"testing"

	"github.com/snapid/snapid/registry"
	"github.com/stretchr/testify/assert"
)

// Space counts what GLOBAL has not handed out and the rest of the data
// centres' ranges, over the sequence's size.
func TestSequenceStatusSpace(t *testing.T) {
	t.Parallel()
	info := func(start, max, next uint64) registry.SequenceInfo {
		return registry.SequenceInfo{Name: "s", Start: start, Max: max, Next: next}
	}
	for _, tc := range []struct {
		name   string
		st     registry.SequenceStatus
		left   uint64
		ratio  float64
		ranges string
	}{
		{name: "new", st: registry.SequenceStatus{SequenceInfo: info(1, 100, 1)}, left: 100, ratio: 1},
		{name: "handed to a data centre, unleased", st: registry.SequenceStatus{SequenceInfo: info(1, 100, 41),
			Ranges: []registry.SequenceRange{{DC: "a", First: 1, Last: 40, Next: 1}}}, left: 100, ratio: 1},
		{name: "partly leased", st: registry.SequenceStatus{SequenceInfo: info(1, 100, 41),
			Ranges: []registry.SequenceRange{{DC: "a", First: 1, Last: 20, Next: 16}, {DC: "b", First: 21, Last: 40, Next: 41}}}, left: 60 + 5, ratio: 0.65},
		{name: "all handed out, some unleased", st: registry.SequenceStatus{SequenceInfo: info(11, 110, 111),
			Ranges: []registry.SequenceRange{{DC: "a", First: 101, Last: 110, Next: 108}}}, left: 3, ratio: 0.03},
		{name: "one left", st: registry.SequenceStatus{SequenceInfo: info(1, 100, 100)}, left: 1, ratio: 0.01},
		{name: "exhausted", st: registry.SequenceStatus{SequenceInfo: info(1, 100, 101),
			Ranges: []registry.SequenceRange{{DC: "a", First: 1, Last: 100, Next: 101}}}, left: 0, ratio: 0},
		{name: "start moved up past a range: at most 1", st: registry.SequenceStatus{SequenceInfo: info(50, 59, 50),
			Ranges: []registry.SequenceRange{{DC: "a", First: 1, Last: 20, Next: 1}}}, left: 30, ratio: 1},
		{name: "the largest sequence", st: registry.SequenceStatus{SequenceInfo: info(1, registry.MaxSequence, 1)}, left: registry.MaxSequence, ratio: 1},
		{name: "32-bit, a quarter left", st: registry.SequenceStatus{SequenceInfo: info(1, 1<<31-1, 3<<29)}, left: 1 << 29, ratio: float64(1<<29) / float64(1<<31-1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := tc.st.Space()
			assert.Equal(t, registry.SequenceSpace{Sequence: "s", Start: tc.st.Start, Max: tc.st.Max, LeftNumbers: tc.left, LeftRatio: sp.LeftRatio}, sp)
			assert.InDelta(t, tc.ratio, sp.LeftRatio, 1e-12)
		})
	}
}
