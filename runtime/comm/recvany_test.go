package comm

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"gocl/abi"
	"gocl/runtime/config/configtest"
	"gocl/runtime/status"
)

// Rank 0 receives from any source while every other rank sends it `per`
// messages; each peer must be reported once per message, its messages in
// the order sent, and the communicator must stay usable.
func recvAnyBody(per int) func(c *Comm) error {
	return func(c *Comm) error {
		const count = 3
		n := c.NRanks()
		if c.Rank() != 0 {
			for k := range per {
				b := make([]byte, count*4)
				binary.LittleEndian.PutUint32(b, uint32(c.Rank()))
				binary.LittleEndian.PutUint32(b[4:], uint32(k))
				if err := c.Run(nil, Op{Coll: 9, Send: ptr(b), Count: count, Type: abi.Int32, Peer: 0, IsSend: true}); err != nil {
					return err
				}
			}
		} else {
			next := make([]int, n)
			for range (n - 1) * per {
				b := make([]byte, count*4)
				peer, err := c.RecvAny(ptr(b), count, abi.Int32)
				if err != nil {
					return err
				}
				from, k := int(binary.LittleEndian.Uint32(b)), int(binary.LittleEndian.Uint32(b[4:]))
				if peer < 1 || peer >= n || from != peer || k != next[peer] {
					return fmt.Errorf("RecvAny reported rank %d for message %d of rank %d (want message %d of it)", peer, k, from, next[max(0, min(peer, n-1))])
				}
				next[peer]++
			}
		}
		b := make([]byte, 4)
		binary.LittleEndian.PutUint32(b, 1)
		if err := c.Run(nil, Op{Coll: 1, Send: ptr(b), Recv: ptr(b), Count: 1, Type: abi.Int32, RedOp: int32(abi.Sum)}); err != nil {
			return err
		}
		if got := int(binary.LittleEndian.Uint32(b)); got != n {
			return fmt.Errorf("allreduce after RecvAny: %d, want %d", got, n)
		}
		return nil
	}
}

func TestRecvAnyInProcess(t *testing.T) {
	configtest.Setenv(t)
	for n := 2; n <= 5; n++ {
		t.Run(fmt.Sprint(n), func(t *testing.T) { clique(t, n, recvAnyBody(3)) })
	}
}

// Between processes: shared memory, and sockets.
func TestRecvAnySharedMemoryAndSockets(t *testing.T) {
	for _, shmOff := range []string{"0", "1"} {
		for _, n := range []int{2, 4} {
			t.Run(fmt.Sprintf("shm_disable=%s/%d", shmOff, n), func(t *testing.T) {
				configtest.Setenv(t, "GOCL_P2P_DISABLE", "1", "GOCL_SHM_DISABLE", shmOff, "GOCL_SOCKET_IFNAME", "lo")
				clique(t, n, recvAnyBody(3))
			})
		}
	}
}

func TestRecvAnyTimesOut(t *testing.T) {
	for _, p2p := range []string{"0", "1"} {
		configtest.Setenv(t, "GOCL_TIMEOUT", "0.3", "GOCL_P2P_DISABLE", p2p)
		clique(t, 2, func(c *Comm) error {
			if c.Rank() != 0 {
				return nil
			}
			_, err := c.RecvAny(ptr(make([]byte, 4)), 1, abi.Int32)
			if status.CodeOf(err) != status.Timeout || !strings.Contains(err.Error(), "timed out") {
				return fmt.Errorf("RecvAny with no sender: %v, want a timeout saying \"timed out\"", err)
			}
			return nil
		})
	}
}

func TestRecvAnyChecksTheFrame(t *testing.T) {
	configtest.Setenv(t)
	clique(t, 2, func(c *Comm) error {
		if c.Rank() == 1 {
			c.Run(nil, Op{Coll: 9, Send: ptr(make([]byte, 16)), Count: 4, Type: abi.Int32, Peer: 0, IsSend: true})
			return nil
		}
		_, err := c.RecvAny(ptr(make([]byte, 12)), 3, abi.Int32)
		if status.CodeOf(err) != status.RemoteError {
			return fmt.Errorf("RecvAny of 3 elements from a send of 4: %v, want a mismatch error", err)
		}
		return nil
	})
}

func TestRecvAnyNeedsAPeer(t *testing.T) {
	configtest.Setenv(t)
	clique(t, 1, func(c *Comm) error {
		_, err := c.RecvAny(ptr(make([]byte, 4)), 1, abi.Int32)
		if status.CodeOf(err) != status.InvalidUsage {
			return fmt.Errorf("RecvAny on one rank: %v, want InvalidUsage", err)
		}
		return nil
	})
}
