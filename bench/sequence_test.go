package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/snapid/snapid"
	"github.com/snapid/snapid/admin"
	"github.com/snapid/snapid/cassandra"
	"github.com/snapid/snapid/internal/testcluster"
	"github.com/snapid/snapid/registry"
)

// BenchmarkSequence measures a sequence's Next in one process on the test
// Cassandra node (scripts/cassandra.sh), beside one LWT round trip on the
// same node: the price a Cassandra-backed sequence without ranges (a lock
// or a conditional update per number, as MetaBroadcast's or a counter per
// id) pays for every number.
//
//	BenchmarkSequence/next/c<N>        s.Next() with N callers (default block and lease, sync on)
//	BenchmarkSequence/lwt-round-trip   one conditional update (Registry.Touch) per op
func BenchmarkSequence(b *testing.B) {
	k := testcluster.NewKeyspace(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg, err := cassandra.NewRegistry(ctx, cassandra.Config{Hosts: k.Hosts, Keyspace: k.Name})
	if err != nil {
		b.Fatal(err)
	}
	defer reg.Close()
	if _, err := admin.CreateSequence(ctx, reg, "bench", 1, registry.MaxSequence); err != nil {
		b.Fatal(err)
	}
	// Each run of a sub-benchmark is a host of its own: its own name and
	// its own records place (never the machine's DefaultBindingDir).
	hosts := 0
	for _, c := range []int{1, 2} {
		b.Run(fmt.Sprintf("next/c%d", c), func(b *testing.B) {
			hosts++
			g, err := snapid.Open(filepath.Join(b.TempDir(), "counter.u64"), fmt.Sprintf("bench_%d", hosts), snapid.Config{
				Registry:   &snapid.RegistryConfig{Registry: reg},
				BindingDir: b.TempDir(),
			})
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			s, err := g.Sequence("bench")
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			runCallers(b, c, func() (string, error) {
				n, err := s.Next()
				return strconv.FormatUint(n, 10), err
			})
		})
	}
	b.Run("lwt-round-trip", func(b *testing.B) {
		// A context of its own: with -count N this runs long after the
		// set-up's context has ended.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		h, err := reg.Claim(ctx, registry.Claim{Name: "bench_lwt", Owner: "0123456789abcdef0123456789abcdef", Hostname: "bench"})
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := reg.Touch(context.Background(), h.Name, h.Owner, h.Session); err != nil {
				b.Fatal(err)
			}
		}
	})
}
