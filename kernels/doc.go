// Package kernels holds gocl's element-wise reductions: a Reducer applies
// one op (sum, prod, max, min, avg, premulsum) to buffers of one NCCL
// datatype, with integers wrapping, NaN winning max/min (numpy's rule) and
// fp16/bf16 computed in float32 and rounded to nearest even.
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
