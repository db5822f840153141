package main

// #include "gocl.h"
import "C"

import (
	"gocl/kernels"
	"gocl/runtime/bootstrap"
	"gocl/runtime/comm"
	"gocl/runtime/status"
)

// gocl.h is the ABI's source of truth; the Go packages repeat its values
// because they are built and tested without cgo. Each line below indexes a
// one-element array with the difference of the header's value and Go's: the
// constant index must be 0, so the library does not compile when they differ
// (either way: a negative index is as much an error as a positive one).
// tests/python/test_abi.py checks the Python side against the same header.
var (
	_ = [1]struct{}{}[int(C.goclSuccess)-int(status.Success)]
	_ = [1]struct{}{}[int(C.goclUnhandledCudaError)-int(status.UnhandledCudaError)]
	_ = [1]struct{}{}[int(C.goclSystemError)-int(status.SystemError)]
	_ = [1]struct{}{}[int(C.goclInternalError)-int(status.InternalError)]
	_ = [1]struct{}{}[int(C.goclInvalidArgument)-int(status.InvalidArgument)]
	_ = [1]struct{}{}[int(C.goclInvalidUsage)-int(status.InvalidUsage)]
	_ = [1]struct{}{}[int(C.goclRemoteError)-int(status.RemoteError)]
	_ = [1]struct{}{}[int(C.goclInProgress)-int(status.InProgress)]
	_ = [1]struct{}{}[int(C.goclTimeout)-int(status.Timeout)]
	_ = [1]struct{}{}[int(C.goclNumResults)-int(status.NumCodes)]

	_ = [1]struct{}{}[int(C.goclInt8)-int(kernels.Int8)]
	_ = [1]struct{}{}[int(C.goclChar)-int(kernels.Int8)]
	_ = [1]struct{}{}[int(C.goclUint8)-int(kernels.Uint8)]
	_ = [1]struct{}{}[int(C.goclInt32)-int(kernels.Int32)]
	_ = [1]struct{}{}[int(C.goclInt)-int(kernels.Int32)]
	_ = [1]struct{}{}[int(C.goclUint32)-int(kernels.Uint32)]
	_ = [1]struct{}{}[int(C.goclInt64)-int(kernels.Int64)]
	_ = [1]struct{}{}[int(C.goclUint64)-int(kernels.Uint64)]
	_ = [1]struct{}{}[int(C.goclFloat16)-int(kernels.Float16)]
	_ = [1]struct{}{}[int(C.goclHalf)-int(kernels.Float16)]
	_ = [1]struct{}{}[int(C.goclFloat32)-int(kernels.Float32)]
	_ = [1]struct{}{}[int(C.goclFloat)-int(kernels.Float32)]
	_ = [1]struct{}{}[int(C.goclFloat64)-int(kernels.Float64)]
	_ = [1]struct{}{}[int(C.goclDouble)-int(kernels.Float64)]
	_ = [1]struct{}{}[int(C.goclBfloat16)-int(kernels.Bfloat16)]
	_ = [1]struct{}{}[int(C.goclNumTypes)-int(kernels.NumTypes)]

	_ = [1]struct{}{}[int(C.goclSum)-int(kernels.Sum)]
	_ = [1]struct{}{}[int(C.goclProd)-int(kernels.Prod)]
	_ = [1]struct{}{}[int(C.goclMax)-int(kernels.Max)]
	_ = [1]struct{}{}[int(C.goclMin)-int(kernels.Min)]
	_ = [1]struct{}{}[int(C.goclAvg)-int(kernels.Avg)]
	_ = [1]struct{}{}[int(C.goclNumOps)-int(kernels.NumOps)]

	_ = [1]struct{}{}[int(C.GOCL_UNIQUE_ID_BYTES)-bootstrap.IDBytes]
	_ = [1]struct{}{}[int(C.GOCL_SPLIT_NOCOLOR)-comm.NoColor]
	_ = [1]struct{}{}[int(C.GOCL_SHRINK_DEFAULT)-int(comm.ShrinkDefault)]
	_ = [1]struct{}{}[int(C.GOCL_SHRINK_ABORT)-int(comm.ShrinkAbort)]
	_ = [1]struct{}{}[int(C.GOCL_VERSION_CODE)-comm.Version]
)
