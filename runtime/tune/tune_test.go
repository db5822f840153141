package tune

import (
	"testing"

	"gocl/runtime/wire"
)

func TestPick(t *testing.T) {
	auto := Plan{DirectThreshold: 1000}
	cases := []struct {
		plan  Plan
		coll  wire.Coll
		bytes int
		want  Algo
	}{
		{auto, wire.AllReduce, 1000, Direct},
		{auto, wire.AllReduce, 1001, Ring},
		{auto, wire.Broadcast, 1 << 20, Ring},
		{auto, wire.AlltoAll, 1 << 20, Direct}, // no ring form
		{Plan{Force: "direct", DirectThreshold: 1000}, wire.AllReduce, 1 << 20, Direct},
		{Plan{Force: "ring", DirectThreshold: 1000}, wire.AllGather, 8, Ring},
		{Plan{Force: "ring"}, wire.Gather, 1 << 20, Direct},
	}
	for _, c := range cases {
		if got := c.plan.Pick(c.coll, c.bytes); got != c.want {
			t.Errorf("%+v.Pick(%s, %d) = %s, want %s", c.plan, c.coll, c.bytes, got, c.want)
		}
	}
}
