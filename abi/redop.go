package abi

import "strconv"

// RedOp identifies a reduction. The builtin values are NCCL's ABI values
// (ncclRedOp_t). PreMulSum is internal: NCCL users obtain it as a handle
// from ncclRedOpCreatePreMulSum, which the C layer maps to this value.
type RedOp int32

const (
	Sum       RedOp = 0
	Prod      RedOp = 1
	Max       RedOp = 2
	Min       RedOp = 3
	Avg       RedOp = 4
	NumOps    RedOp = 5
	PreMulSum RedOp = 100
)

func (o RedOp) String() string {
	switch o {
	case Sum:
		return "sum"
	case Prod:
		return "prod"
	case Max:
		return "max"
	case Min:
		return "min"
	case Avg:
		return "avg"
	case PreMulSum:
		return "premulsum"
	}
	return "redop(" + strconv.Itoa(int(o)) + ")"
}
