// Package kernels holds gocl's element-wise reductions: a DataType and a
// RedOp with NCCL's ABI values (gocl.h's goclDataType_t and goclRedOp_t;
// capi/abi.go fails to compile if they drift apart), and the Reducer that
// applies one (type, op) pair to byte buffers: Prepare (PreMulSum's scaling),
// Accumulate (dst = acc op in) and Finalize (Avg's division). Every dispatch
// on (type, op) happens once in NewReducer, so the algorithms call one
// function per buffer. float16 and bfloat16 are computed in float32 and
// rounded to nearest even (F32ToF16, F32ToBF16); Avg on integers truncates.
package kernels
