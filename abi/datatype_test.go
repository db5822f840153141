package abi

import "testing"

func TestDataType(t *testing.T) {
	tests := []struct {
		t     DataType
		valid bool
		size  int
		name  string
		float bool
	}{
		{Int8, true, 1, "int8", false},
		{Uint8, true, 1, "uint8", false},
		{Int32, true, 4, "int32", false},
		{Uint32, true, 4, "uint32", false},
		{Int64, true, 8, "int64", false},
		{Uint64, true, 8, "uint64", false},
		{Float16, true, 2, "float16", true},
		{Float32, true, 4, "float32", true},
		{Float64, true, 8, "float64", true},
		{Bfloat16, true, 2, "bfloat16", true},
		{NumTypes, false, 0, "datatype(10)", false},
		{-1, false, 0, "datatype(-1)", false},
		{12, false, 0, "datatype(12)", false},
	}
	for _, tc := range tests {
		if got := tc.t.Valid(); got != tc.valid {
			t.Errorf("%d.Valid() = %v, want %v", int32(tc.t), got, tc.valid)
		}
		if got := tc.t.Size(); got != tc.size {
			t.Errorf("%d.Size() = %d, want %d", int32(tc.t), got, tc.size)
		}
		if got := tc.t.String(); got != tc.name {
			t.Errorf("%d.String() = %q, want %q", int32(tc.t), got, tc.name)
		}
		if got := tc.t.IsFloat(); got != tc.float {
			t.Errorf("%d.IsFloat() = %v, want %v", int32(tc.t), got, tc.float)
		}
	}
}

func TestRedOpString(t *testing.T) {
	tests := []struct {
		op   RedOp
		name string
	}{
		{Sum, "sum"}, {Prod, "prod"}, {Max, "max"}, {Min, "min"}, {Avg, "avg"},
		{PreMulSum, "premulsum"}, {NumOps, "redop(5)"}, {-3, "redop(-3)"}, {99, "redop(99)"},
	}
	for _, tc := range tests {
		if got := tc.op.String(); got != tc.name {
			t.Errorf("RedOp(%d).String() = %q, want %q", int32(tc.op), got, tc.name)
		}
	}
}

// The numeric values are NCCL's ABI and must never change.
func TestABIValues(t *testing.T) {
	types := []DataType{Int8, Uint8, Int32, Uint32, Int64, Uint64, Float16, Float32, Float64, Bfloat16, NumTypes}
	for i, ty := range types {
		if int(ty) != i {
			t.Errorf("%v = %d, want %d", ty, int(ty), i)
		}
	}
	ops := []RedOp{Sum, Prod, Max, Min, Avg, NumOps}
	for i, op := range ops {
		if int(op) != i {
			t.Errorf("%v = %d, want %d", op, int(op), i)
		}
	}
	if PreMulSum != 100 {
		t.Errorf("PreMulSum = %d, want 100", int(PreMulSum))
	}
}
