package kernels

// Element loops for float16 and bfloat16. Every element is widened to
// float32, combined in float32 and rounded once back to 16 bits. They are
// spelled out per format rather than made generic: both formats share the
// uint16 GC shape, so a generic version would convert through dictionary
// calls.
//
// fp16 narrowing inlines f16Normal and only falls back to the full F32ToF16
// for results outside the normal range (subnormal, overflow, inf, NaN).

// float16

func sumF16(d, a, b []uint16) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		s := F16ToF32(a[i]) + F16ToF32(b[i])
		h, ok := f16Normal(s)
		if !ok {
			h = F32ToF16(s)
		}
		d[i] = h
	}
}

func prodF16(d, a, b []uint16) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		s := F16ToF32(a[i]) * F16ToF32(b[i])
		h, ok := f16Normal(s)
		if !ok {
			h = F32ToF16(s)
		}
		d[i] = h
	}
}

func maxF16(d, a, b []uint16) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		s := max(F16ToF32(a[i]), F16ToF32(b[i]))
		h, ok := f16Normal(s)
		if !ok {
			h = F32ToF16(s)
		}
		d[i] = h
	}
}

func minF16(d, a, b []uint16) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		s := min(F16ToF32(a[i]), F16ToF32(b[i]))
		h, ok := f16Normal(s)
		if !ok {
			h = F32ToF16(s)
		}
		d[i] = h
	}
}

func preMulSumF16(d, a, b []uint16, k float32) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		s := F16ToF32(a[i]) + float32(k*F16ToF32(b[i])) // float32(): no FMA
		h, ok := f16Normal(s)
		if !ok {
			h = F32ToF16(s)
		}
		d[i] = h
	}
}

func scaleF16(d, s []uint16, k float32) {
	s = s[:len(d)]
	for i := range d {
		d[i] = F32ToF16(k * F16ToF32(s[i]))
	}
}

func divF16(d []uint16, n float32) {
	for i := range d {
		d[i] = F32ToF16(F16ToF32(d[i]) / n)
	}
}

// bfloat16

func sumBF16(d, a, b []uint16) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = F32ToBF16(BF16ToF32(a[i]) + BF16ToF32(b[i]))
	}
}

func prodBF16(d, a, b []uint16) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = F32ToBF16(BF16ToF32(a[i]) * BF16ToF32(b[i]))
	}
}

func maxBF16(d, a, b []uint16) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = F32ToBF16(max(BF16ToF32(a[i]), BF16ToF32(b[i])))
	}
}

func minBF16(d, a, b []uint16) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = F32ToBF16(min(BF16ToF32(a[i]), BF16ToF32(b[i])))
	}
}

func preMulSumBF16(d, a, b []uint16, k float32) {
	a, b = a[:len(d)], b[:len(d)]
	for i := range d {
		d[i] = F32ToBF16(BF16ToF32(a[i]) + float32(k*BF16ToF32(b[i]))) // float32(): no FMA
	}
}

func scaleBF16(d, s []uint16, k float32) {
	s = s[:len(d)]
	for i := range d {
		d[i] = F32ToBF16(k * BF16ToF32(s[i]))
	}
}

func divBF16(d []uint16, n float32) {
	for i := range d {
		d[i] = F32ToBF16(BF16ToF32(d[i]) / n)
	}
}
