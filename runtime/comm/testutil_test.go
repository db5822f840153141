package comm

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"gocl/abi"
	"gocl/kernels"
)

// clique makes n in-process ranks and runs body on each concurrently,
// failing the test with every rank's error.
func clique(t *testing.T, n int, body func(c *Comm) error) {
	t.Helper()
	comms, err := InitAll(n, nil, Options{})
	if err != nil {
		t.Fatalf("InitAll(%d): %v", n, err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = body(c)
		}()
	}
	wg.Wait()
	for _, c := range comms {
		c.Destroy()
	}
	for i, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", i, err)
		}
	}
}

func ptr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Pointer(&b[0])
}

// Typed values for references: inputs are small integers, so sums are exact
// in every type and only avg rounds.

func encode(t abi.DataType, b []byte, v float64) {
	switch t {
	case abi.Int8:
		b[0] = byte(int8(int64(v)))
	case abi.Uint8:
		b[0] = byte(uint8(int64(v)))
	case abi.Int32, abi.Uint32:
		binary.LittleEndian.PutUint32(b, uint32(int64(v)))
	case abi.Int64, abi.Uint64:
		binary.LittleEndian.PutUint64(b, uint64(int64(v)))
	case abi.Float16:
		binary.LittleEndian.PutUint16(b, kernels.F32ToF16(float32(v)))
	case abi.Bfloat16:
		binary.LittleEndian.PutUint16(b, kernels.F32ToBF16(float32(v)))
	case abi.Float32:
		binary.LittleEndian.PutUint32(b, math.Float32bits(float32(v)))
	case abi.Float64:
		binary.LittleEndian.PutUint64(b, math.Float64bits(v))
	}
}

func decode(t abi.DataType, b []byte) float64 {
	switch t {
	case abi.Int8:
		return float64(int8(b[0]))
	case abi.Uint8:
		return float64(b[0])
	case abi.Int32:
		return float64(int32(binary.LittleEndian.Uint32(b)))
	case abi.Uint32:
		return float64(binary.LittleEndian.Uint32(b))
	case abi.Int64:
		return float64(int64(binary.LittleEndian.Uint64(b)))
	case abi.Uint64:
		return float64(binary.LittleEndian.Uint64(b))
	case abi.Float16:
		return float64(kernels.F16ToF32(binary.LittleEndian.Uint16(b)))
	case abi.Bfloat16:
		return float64(kernels.BF16ToF32(binary.LittleEndian.Uint16(b)))
	case abi.Float32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
	}
	return math.Float64frombits(binary.LittleEndian.Uint64(b))
}

// input is rank r's element i for a call with op.
func input(t abi.DataType, op abi.RedOp, r, i int) float64 {
	if op == abi.Prod { // |product| <= 2^8: exact in every type, wraps int8 the same way
		v := [...]float64{1, 2, 1, -1, 1}[(r+i)%5]
		if !signed(t) {
			v = math.Abs(v)
		}
		return v
	}
	v := float64((r*7+i*3)%11 - 5)
	if !signed(t) {
		v += 5
	}
	return v
}

func signed(t abi.DataType) bool {
	return t != abi.Uint8 && t != abi.Uint32 && t != abi.Uint64
}

// reference reduces every rank's element i the way the op defines it.
func reference(t abi.DataType, op abi.RedOp, scalar float64, n, i int) float64 {
	acc := 0.0
	for r := 0; r < n; r++ {
		v := input(t, op, r, i)
		switch {
		case r == 0 && op != abi.PreMulSum:
			acc = v
		case op == abi.Sum || op == abi.Avg:
			acc += v
		case op == abi.Prod:
			acc *= v
		case op == abi.Max:
			acc = math.Max(acc, v)
		case op == abi.Min:
			acc = math.Min(acc, v)
		case op == abi.PreMulSum:
			acc += scalar * v
		}
	}
	if op == abi.Avg {
		if t.IsFloat() {
			return acc / float64(n)
		}
		return float64(int64(acc) / int64(n))
	}
	// Integers wrap: round-trip through the type.
	var b [8]byte
	encode(t, b[:], acc)
	return decode(t, b[:])
}

func fill(t abi.DataType, op abi.RedOp, r, count int) []byte {
	b := make([]byte, count*t.Size())
	for i := 0; i < count; i++ {
		encode(t, b[i*t.Size():], input(t, op, r, i))
	}
	return b
}

func near(t abi.DataType, got, want float64) bool {
	if !t.IsFloat() {
		return got == want
	}
	tol := 1e-12
	switch t {
	case abi.Float16, abi.Bfloat16:
		tol = 1e-2
	case abi.Float32:
		tol = 1e-6
	}
	return math.Abs(got-want) <= tol*math.Max(1, math.Abs(want))
}

// checker collects mismatches of one call with context.
type checker struct {
	errs []string
}

func (k *checker) expect(what string, t abi.DataType, buf []byte, idx int, want float64) bool {
	got := decode(t, buf[idx*t.Size():])
	if !near(t, got, want) {
		if len(k.errs) < 20 {
			k.errs = append(k.errs, fmt.Sprintf("%s: element %d = %v, want %v", what, idx, got, want))
		}
		return false
	}
	return true
}

func (k *checker) err() error {
	if len(k.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%d mismatches:\n  %s", len(k.errs), strings.Join(k.errs, "\n  "))
}

var allTypes = []abi.DataType{abi.Int8, abi.Uint8, abi.Int32, abi.Uint32, abi.Int64,
	abi.Uint64, abi.Float16, abi.Float32, abi.Float64, abi.Bfloat16}

var allOps = []abi.RedOp{abi.Sum, abi.Prod, abi.Max, abi.Min, abi.Avg, abi.PreMulSum}

// redOp turns a kernels op into a call's op, creating a PreMulSum by 2.
func redOp(c *Comm, t abi.DataType, op abi.RedOp) (int32, func(), error) {
	if op != abi.PreMulSum {
		return int32(op), func() {}, nil
	}
	s := make([]byte, 8)
	encode(t, s, 2)
	h, err := c.CreatePreMulSum(t, s[:t.Size()])
	return h, func() { c.DestroyRedOp(h) }, err
}

// localComms makes n in-process ranks (InitAll), destroyed when the test ends.
func localComms(t *testing.T, n int) []*Comm {
	t.Helper()
	comms, err := InitAll(n, nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Destroy()
		}
	})
	return comms
}
