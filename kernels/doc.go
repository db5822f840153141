// Package kernels holds gocl's element-wise reductions: the Reducer that
// applies one (abi.DataType, abi.RedOp) pair to byte buffers: Prepare (PreMulSum's scaling),
// Accumulate (dst = acc op in) and Finalize (Avg's division). Every dispatch
// on (type, op) happens once in NewReducer, so the algorithms call one
// function per buffer. Integers wrap, NaN wins max/min (numpy's rule), and
// float16 and bfloat16 are computed in float32 and rounded to nearest even
// (F32ToF16, F32ToBF16); Avg on integers truncates.
//
// The loops exist twice. The portable Go loops (numeric.go, halfops.go) are
// the reference and run everywhere. On amd64 with AVX2 and F16C, chosen
// once at start-up by CPUID, generated assembly kernels (gen/, `go generate`)
// run the whole 32-byte blocks and the portable loops the tail; they give
// bit-identical results, NaN signs and payloads included (where the
// portable result does not depend on the compiler's operand order), which
// simd_test.go checks on every dtype × op. ISA reports which is in use;
// race-detector builds use the portable loops, whose accesses it can see.
package kernels
