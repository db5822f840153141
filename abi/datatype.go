package abi

import "strconv"

// DataType identifies an element type. The values are NCCL's ABI values
// (ncclDataType_t), so they pass through the C API unchanged.
type DataType int32

const (
	Int8     DataType = 0
	Uint8    DataType = 1
	Int32    DataType = 2
	Uint32   DataType = 3
	Int64    DataType = 4
	Uint64   DataType = 5
	Float16  DataType = 6
	Float32  DataType = 7
	Float64  DataType = 8
	Bfloat16 DataType = 9
	NumTypes DataType = 10
)

var dtypeInfo = [NumTypes]struct {
	name  string
	size  int
	float bool
}{
	Int8:     {"int8", 1, false},
	Uint8:    {"uint8", 1, false},
	Int32:    {"int32", 4, false},
	Uint32:   {"uint32", 4, false},
	Int64:    {"int64", 8, false},
	Uint64:   {"uint64", 8, false},
	Float16:  {"float16", 2, true},
	Float32:  {"float32", 4, true},
	Float64:  {"float64", 8, true},
	Bfloat16: {"bfloat16", 2, true},
}

// Valid reports whether t is one of the NumTypes known types.
func (t DataType) Valid() bool { return t >= 0 && t < NumTypes }

// Size returns the element size in bytes, or 0 if t is invalid.
func (t DataType) Size() int {
	if !t.Valid() {
		return 0
	}
	return dtypeInfo[t].size
}

// IsFloat reports whether t is a floating-point type (including float16 and bfloat16).
func (t DataType) IsFloat() bool { return t.Valid() && dtypeInfo[t].float }

func (t DataType) String() string {
	if !t.Valid() {
		return "datatype(" + strconv.Itoa(int(t)) + ")"
	}
	return dtypeInfo[t].name
}
