package bench

import (
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"

	"github.com/bwmarrin/snowflake"
	"github.com/google/uuid"
	"github.com/rs/xid"
	"github.com/snapid/snapid"
)

// BenchmarkCompareHeap measures one caller of each generator that is not
// rate-limited, in two settings of the process's heap, and in two kinds of
// result:
//
//	BenchmarkCompareHeap/<heap>/<kind>/<impl>/<mode>/c1
//
// heap:
//
//	fresh   the heap is collected and returned to the system before each line
//	busy    256 MiB of live, pointer-rich objects (4 Mi linked 64-byte nodes)
//	        stay reachable for the whole line, so that every collection marks
//	        them while the workload allocates: a process that has other work
//
// kind:
//
//	string  the id as a string (one allocation for every generator)
//	native  each generator's own result, which allocates nothing: snapid's
//	        AppendUniqueID into a reused buffer and, striped, UniqueUint64; a
//	        snowflake int64, an xid or a UUID value
//
// Every line of one heap setting runs in the same process after the same
// preparation, so the ratios between generators hold for that setting.
func BenchmarkCompareHeap(b *testing.B) {
	for _, heap := range []string{"fresh", "busy"} {
		var keep *ballastNode
		if heap == "busy" {
			keep = buildBallast(256 << 20)
		}
		for _, w := range heapWorkloads {
			b.Run(fmt.Sprintf("%s/%s/%s/%s/c1", heap, w.kind, w.impl, w.mode), func(b *testing.B) {
				next := w.open(b)
				if heap == "fresh" {
					debug.FreeOSMemory() // a collection, and the heap returned
				} else {
					runtime.GC()
				}
				runCallers(b, 1, next)
			})
		}
		runtime.KeepAlive(keep)
	}
}

// ballastNode is 64 bytes with seven pointers: marking it costs what
// marking a typical object graph does.
type ballastNode struct {
	next *ballastNode
	refs [7]*ballastNode
}

// buildBallast links size bytes of nodes, each pointing back to a few
// earlier ones.
func buildBallast(size int) *ballastNode {
	nodes := size / 64
	all := make([]*ballastNode, 0, 1024)
	var head *ballastNode
	for i := range nodes {
		n := &ballastNode{next: head}
		for j := range n.refs {
			if len(all) > 0 {
				n.refs[j] = all[(i*7+j*131)%len(all)]
			}
		}
		if len(all) < cap(all) {
			all = append(all, n)
		} else {
			all[i%len(all)] = n
		}
		head = n
	}
	return head
}

// heapWorkload is one generator's call of one kind.
type heapWorkload struct {
	kind, impl, mode string
	open             func(testing.TB) func() (string, error)
}

// sink keeps the native results alive, so that the compiler cannot drop a
// call whose result is not used.
var sink struct {
	u64  uint64
	i64  int64
	xid  xid.ID
	uuid uuid.UUID
	buf  []byte
}

// openSnapidGenerator opens a block-mode Generator of its own, in the form
// given (nil: the name form), released at the end of the test or benchmark.
func openSnapidGenerator(tb testing.TB, form snapid.Form) *snapid.Generator {
	dir := tb.TempDir() // a host of its own, with its own records of names
	g, err := snapid.Open(filepath.Join(dir, "counter.u64"), nodeName, snapid.Config{
		Form:       form,
		Block:      &snapid.Block{Size: blockSize},
		BindingDir: filepath.Join(dir, "records"),
	})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := g.Close(); err != nil {
			tb.Error(err)
		}
	})
	return g
}

var (
	decimalForm = snapid.Decimal{NodeNumber: 123}
	stripedForm = snapid.Striped{NodeNumber: 123, Stride: 1024}
)

var heapWorkloads = []heapWorkload{
	{"string", "snapid", "block=65536", func(tb testing.TB) func() (string, error) {
		return openSnapidGenerator(tb, nil).UniqueID
	}},
	{"string", "snapid", "block=65536+decimal", func(tb testing.TB) func() (string, error) {
		return openSnapidGenerator(tb, decimalForm).UniqueID
	}},
	{"string", "snapid", "block=65536+striped", func(tb testing.TB) func() (string, error) {
		return openSnapidGenerator(tb, stripedForm).UniqueID
	}},
	{"string", "snowflake", "node=1+stepbits=21", openSnowflake(1, 21)},
	{"string", "xid", "new", func(testing.TB) func() (string, error) {
		return func() (string, error) { return xid.New().String(), nil }
	}},
	{"string", "uuid", "v7", func(testing.TB) func() (string, error) {
		return func() (string, error) {
			u, err := uuid.NewV7()
			return u.String(), err
		}
	}},
	{"native", "snapid", "block=65536+AppendUniqueID", func(tb testing.TB) func() (string, error) {
		g := openSnapidGenerator(tb, nil)
		sink.buf = make([]byte, 0, 64)
		return func() (string, error) {
			var err error
			sink.buf, err = g.AppendUniqueID(sink.buf[:0])
			return "", err
		}
	}},
	{"native", "snapid", "block=65536+striped+UniqueUint64", func(tb testing.TB) func() (string, error) {
		g := openSnapidGenerator(tb, stripedForm)
		return func() (string, error) {
			var err error
			sink.u64, err = g.UniqueUint64()
			return "", err
		}
	}},
	{"native", "snowflake", "node=1+stepbits=21+Int64", func(tb testing.TB) func() (string, error) {
		node := newSnowflakeNode(tb, 1, 21)
		return func() (string, error) {
			sink.i64 = node.Generate().Int64()
			return "", nil
		}
	}},
	{"native", "xid", "new+ID", func(testing.TB) func() (string, error) {
		return func() (string, error) {
			sink.xid = xid.New()
			return "", nil
		}
	}},
	{"native", "uuid", "v7+UUID", func(testing.TB) func() (string, error) {
		return func() (string, error) {
			var err error
			sink.uuid, err = uuid.NewV7()
			return "", err
		}
	}},
}

// newSnowflakeNode makes node 1 with these bit widths (see openSnowflake).
func newSnowflakeNode(tb testing.TB, nodeBits, stepBits uint8) *snowflake.Node {
	snowflakeMu.Lock()
	defer snowflakeMu.Unlock()
	snowflake.NodeBits, snowflake.StepBits = nodeBits, stepBits
	node, err := snowflake.NewNode(1)
	snowflake.NodeBits, snowflake.StepBits = 10, 12
	if err != nil {
		tb.Fatal(err)
	}
	return node
}

// TestHeapWorkloads: every line of BenchmarkCompareHeap makes distinct ids
// without an error, and snapid's parse back to this node in their form.
func TestHeapWorkloads(t *testing.T) {
	for _, w := range heapWorkloads {
		t.Run(w.kind+"/"+w.impl+"/"+w.mode, func(t *testing.T) {
			next := w.open(t)
			seen := map[string]bool{}
			for range 2000 {
				id, err := next()
				if err != nil {
					t.Fatal(err)
				}
				if w.kind == "native" {
					id = fmt.Sprint(sink.u64, sink.i64, sink.xid, sink.uuid, string(sink.buf))
				}
				if seen[id] {
					t.Fatalf("id %q twice", id)
				}
				seen[id] = true
			}
			if w.impl != "snapid" {
				return
			}
			var id snapid.ID
			var err error
			switch {
			case w.kind == "string":
				var s string
				for s = range seen {
					break
				}
				id, err = snapid.ParseID(s)
			case w.mode == "block=65536+AppendUniqueID":
				id, err = snapid.ParseID(string(sink.buf))
			default:
				id, err = snapid.ParseID(strconv.FormatUint(sink.u64, 10))
			}
			if err == nil && id.Form == snapid.FormatStriped {
				id, err = id.Unstripe(1024)
			}
			if err != nil {
				t.Fatal(err)
			}
			if id.Name != nodeName && (id.Node != 123 || id.Number == 0) {
				t.Fatalf("id %+v: neither node %q nor node number 123", id, nodeName)
			}
		})
	}
}
