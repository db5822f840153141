package wire

import "testing"

// Every collective has a row, and the rows say what NCCL's API says of each
// (the size rules themselves are checked against runtime/comm/testdata/elems.json).
func TestEveryCollHasADesc(t *testing.T) {
	reduces := map[Coll]bool{AllReduce: true, Reduce: true, ReduceScatter: true}
	rooted := map[Coll]bool{Broadcast: true, Reduce: true, Gather: true, Scatter: true}
	for c := AllReduce; c <= SendRecv; c++ {
		d := c.Desc()
		if d.Name == "" || d.Name == "?" || d.BusFactor == nil || d.Send == None || d.Recv == None {
			t.Errorf("%d: incomplete row %+v", c, d)
		}
		if d.Reduces != reduces[c] || d.Rooted != rooted[c] || (d.RootSends || d.RootRecvs) && !d.Rooted {
			t.Errorf("%s: reduces %v rooted %v (root sends %v, recvs %v)", c, d.Reduces, d.Rooted, d.RootSends, d.RootRecvs)
		}
	}
	if got := Coll(0).String(); got != "?" {
		t.Errorf("Coll(0) is %q", got)
	}
	if got := Coll(200).String(); got != "coll(200)" || Coll(200).Desc().Reduces {
		t.Errorf("an unknown collective: %q %+v", got, Coll(200).Desc())
	}
	if f := AllReduce.Desc().BusFactor(4); f != 1.5 {
		t.Errorf("allreduce's bus factor on 4 ranks is %v, want 2(n-1)/n = 1.5", f)
	}
}
