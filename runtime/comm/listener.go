package comm

import (
	"encoding/json"
	"fmt"
	"time"

	"gocl/runtime/agree/agreenet"
	"gocl/runtime/bootstrap"
	"gocl/runtime/heartbeat"
)

// Every rank keeps its bootstrap listener after init and answers requests
// on it from goroutines of its own, on a path that does not depend on the
// links: liveness probes (culprit.go), the status view (statusd.go), the
// shrink agreement's messages (runtime/agree/agreenet), revocations, the
// heartbeat's verdicts (runtime/heartbeat) and links made on first use
// (lazy.go).

const askRevoke = "revoke"

// listenerReply answers requests that have no reply of their own.
type listenerReply struct {
	Err string `json:"err,omitempty"`
}

// serve answers a request on this rank's bootstrap listener.
func (c *Comm) serve(req bootstrap.Request) any {
	switch req.Kind {
	case bootstrap.AskProbe:
		return c.answer()
	case askStatus:
		return c.ownView()
	case agreenet.Ask:
		return c.agreement.Receive(req.Body)
	case askRevoke:
		var from int
		if err := json.Unmarshal(req.Body, &from); err != nil || from < 0 || from >= c.nranks {
			return listenerReply{Err: fmt.Sprintf("rank %d: malformed revoke request", c.rank)}
		}
		c.fail(revoked(c.rank, from))
		return listenerReply{}
	case heartbeat.AskGone:
		if err := heartbeat.Receive((*beatMember)(c), req.Body); err != nil {
			return listenerReply{Err: err.Error()}
		}
		return listenerReply{}
	case bootstrap.AskLink:
		return c.takeLink(req.Body)
	}
	return listenerReply{Err: fmt.Sprintf("rank %d: unknown request %q (a gocl of another version?)", c.rank, req.Kind)}
}

// agreeMember is a communicator as its shrink agreement sees it
// (runtime/agree/agreenet).
type agreeMember Comm

func (m *agreeMember) Rank() int             { return m.rank }
func (m *agreeMember) Ranks() int            { return m.nranks }
func (m *agreeMember) Addr(p int) string     { return m.peers[p].Addr }
func (m *agreeMember) Secret() []byte        { return m.secret }
func (m *agreeMember) Window() time.Duration { return m.timeout }
func (m *agreeMember) NewRoot(lifetime time.Duration) (bootstrap.ID, error) {
	return (*Comm)(m).newUniqueID(lifetime)
}
