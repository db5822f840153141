package main

// #include "gocl.h"
import "C"

import (
	"gocl/abi"
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

	_ = [1]struct{}{}[int(C.goclInt8)-int(abi.Int8)]
	_ = [1]struct{}{}[int(C.goclChar)-int(abi.Int8)]
	_ = [1]struct{}{}[int(C.goclUint8)-int(abi.Uint8)]
	_ = [1]struct{}{}[int(C.goclInt32)-int(abi.Int32)]
	_ = [1]struct{}{}[int(C.goclInt)-int(abi.Int32)]
	_ = [1]struct{}{}[int(C.goclUint32)-int(abi.Uint32)]
	_ = [1]struct{}{}[int(C.goclInt64)-int(abi.Int64)]
	_ = [1]struct{}{}[int(C.goclUint64)-int(abi.Uint64)]
	_ = [1]struct{}{}[int(C.goclFloat16)-int(abi.Float16)]
	_ = [1]struct{}{}[int(C.goclHalf)-int(abi.Float16)]
	_ = [1]struct{}{}[int(C.goclFloat32)-int(abi.Float32)]
	_ = [1]struct{}{}[int(C.goclFloat)-int(abi.Float32)]
	_ = [1]struct{}{}[int(C.goclFloat64)-int(abi.Float64)]
	_ = [1]struct{}{}[int(C.goclDouble)-int(abi.Float64)]
	_ = [1]struct{}{}[int(C.goclBfloat16)-int(abi.Bfloat16)]
	_ = [1]struct{}{}[int(C.goclNumTypes)-int(abi.NumTypes)]

	_ = [1]struct{}{}[int(C.goclSum)-int(abi.Sum)]
	_ = [1]struct{}{}[int(C.goclProd)-int(abi.Prod)]
	_ = [1]struct{}{}[int(C.goclMax)-int(abi.Max)]
	_ = [1]struct{}{}[int(C.goclMin)-int(abi.Min)]
	_ = [1]struct{}{}[int(C.goclAvg)-int(abi.Avg)]
	_ = [1]struct{}{}[int(C.goclNumOps)-int(abi.NumOps)]

	_ = [1]struct{}{}[int(C.GOCL_UNIQUE_ID_BYTES)-bootstrap.IDBytes]
	_ = [1]struct{}{}[int(C.GOCL_SPLIT_NOCOLOR)-comm.NoColor]
	_ = [1]struct{}{}[int(C.GOCL_SHRINK_DEFAULT)-int(comm.ShrinkDefault)]
	_ = [1]struct{}{}[int(C.GOCL_SHRINK_ABORT)-int(comm.ShrinkAbort)]
	_ = [1]struct{}{}[int(C.GOCL_VERSION_CODE)-comm.Version]
)
