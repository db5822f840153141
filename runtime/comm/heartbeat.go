package comm

import (
	"gocl/runtime/bootstrap"
	"gocl/runtime/config"
	"gocl/runtime/heartbeat"
	"gocl/runtime/transport"
)

// A communicator's heartbeat (runtime/heartbeat) watches the next process's
// rank and spreads its verdicts over the listeners; what it sees of the
// communicator is beatMember.

// beatMember is a communicator as its heartbeat sees it.
type beatMember Comm

func (m *beatMember) Rank() int                     { return m.rank }
func (m *beatMember) Ranks() int                    { return m.nranks }
func (m *beatMember) Peer(p int) bootstrap.PeerInfo { return m.peers[p] }
func (m *beatMember) Secret() []byte                { return m.secret }
func (m *beatMember) Unusable() bool                { return m.unusable.Load() }
func (m *beatMember) Take(v heartbeat.Verdict)      { (*Comm)(m).takeVerdict(v) }

// startHeartbeat starts the watcher when heartbeats are on and this rank
// has a peer to watch; it ends when the communicator fails or is freed.
func (c *Comm) startHeartbeat() {
	c.beats = heartbeat.Watch((*beatMember)(c), config.HeartbeatTimeout())
}

// takeVerdict fails this rank's communicator with the verdict v (calls in
// progress and later ones fail naming v.Root) and tells the shrink
// agreement that v.Root is gone.
func (c *Comm) takeVerdict(v heartbeat.Verdict) {
	via := v.From
	if via == c.rank {
		via = -1
	}
	c.fail(transport.NewError(transport.Error{Kind: transport.KindStalled, Self: c.rank, Peer: v.Root, Via: via,
		What: "heartbeat", Detail: v.Detail}))
	c.agreement.Dead(v.Root)
}
