// Package abi holds the element types and reductions of gocl's C API as Go
// types: DataType and RedOp, with NCCL's ABI values (gocl.h's
// goclDataType_t and goclRedOp_t; capi/abi.go fails to compile if they
// drift apart). Every layer names them from here: the C API, the
// communicator, the frame header and the reduction kernels.
package abi
