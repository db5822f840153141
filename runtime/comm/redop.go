package comm

import (
	"fmt"

	"gocl/abi"
	"gocl/kernels"
	"gocl/runtime/status"
)

// preMulSum is a custom op made by CreatePreMulSum.
type preMulSum struct {
	dtype  abi.DataType
	scalar []byte
}

// CreatePreMulSum registers an op that scales inputs by scalar (one element
// of dtype) before summing; the handle is valid on this comm only.
func (c *Comm) CreatePreMulSum(dtype abi.DataType, scalar []byte) (int32, error) {
	if !dtype.Valid() {
		return 0, status.Errorf(status.InvalidArgument, "premulsum on rank %d: datatype %d is not a gocl datatype", c.rank, int(dtype))
	}
	if _, err := kernels.NewReducer(dtype, abi.PreMulSum, c.nranks, scalar); err != nil {
		return 0, status.Errorf(status.InvalidArgument, "premulsum on rank %d: %v", c.rank, err)
	}
	c.redMu.Lock()
	defer c.redMu.Unlock()
	h := c.nextOp
	c.nextOp++
	c.redops[h] = preMulSum{dtype, append([]byte(nil), scalar...)}
	return h, nil
}

// DestroyRedOp frees a custom op.
func (c *Comm) DestroyRedOp(h int32) error {
	c.redMu.Lock()
	defer c.redMu.Unlock()
	if _, ok := c.redops[h]; !ok {
		return status.Errorf(status.InvalidArgument, "rank %d: op %d is not a custom op of this communicator (builtin ops need no destroy)", c.rank, h)
	}
	delete(c.redops, h)
	return nil
}

// reducer builds the reducer for a builtin op or a custom op handle.
func (c *Comm) reducer(t abi.DataType, h int32) (*kernels.Reducer, error) {
	if h >= 0 && h < int32(abi.NumOps) {
		if t < 0 || t >= abi.NumTypes {
			return kernels.NewReducer(t, abi.RedOp(h), c.nranks, nil) // its error names the type
		}
		// Reducers are immutable: a builtin one is built once per comm, not
		// per call (the small-message call path counts every allocation).
		slot := &c.builtin[t][h]
		if r := slot.Load(); r != nil {
			return r, nil
		}
		r, err := kernels.NewReducer(t, abi.RedOp(h), c.nranks, nil)
		if err == nil {
			slot.Store(r)
		}
		return r, err
	}
	c.redMu.Lock()
	p, ok := c.redops[h]
	c.redMu.Unlock()
	if !ok {
		return nil, fmt.Errorf("op %d is neither a builtin op (sum, prod, max, min, avg: 0..4) nor a live goclRedOpCreatePreMulSum handle of this communicator", h)
	}
	if p.dtype != t {
		return nil, fmt.Errorf("op %d was created for %s but the call uses %s: create the premulsum op with the call's datatype", h, p.dtype, t)
	}
	return kernels.NewReducer(t, abi.PreMulSum, c.nranks, p.scalar)
}
