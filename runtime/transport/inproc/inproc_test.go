package inproc_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"gocl/runtime/transport"
	"gocl/runtime/transport/inproc"
	"gocl/runtime/transport/transporttest"
)

var pairs atomic.Int64

func pair(t *testing.T) (transport.Link, transport.Link) {
	key := fmt.Sprint("conformance-", pairs.Add(1))
	return inproc.Connect(key, 0, 1), inproc.Connect(key, 1, 0)
}

func TestConformance(t *testing.T) { transporttest.Run(t, pair) }
