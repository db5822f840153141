// Command gen writes the AVX2 reduction kernels of package kernels:
// avx2_amd64.s (the loops) and avx2_amd64.go (their declarations and the
// dtype × op tables). Run it with `go generate ./kernels`.
//
// Every kernel has the same shape: a loop over n bytes (a multiple of 32,
// the Go side runs the portable loop on the rest) that loads one or two
// inputs, combines them and stores the result. Each element is read before
// its slot is written, so dst may alias an input exactly. The per-element
// work is spelled out below as instruction templates; the float sequences
// mirror what the Go compiler emits for the portable loops (operand order
// included), which is what keeps the two paths bit-identical.
package main

import (
	"bytes"
	"fmt"
	"go/format"
	"os"
	"strings"
)

// An op turns registers x and y into a result in x; y is left intact (it
// may be a broadcast constant). t holds scratch registers.
type op struct {
	temps int
	emit  func(w *asm, x, y string, t []string)
}

type asm struct{ bytes.Buffer }

func (w *asm) i(format string, args ...any) { fmt.Fprintf(w, "\t"+format+"\n", args...) }

// Constant registers, filled before the loop. The group registers come
// from the bottom (Y0 up), constants from the top (Y15 down).
type consts struct {
	regs  map[string]string
	setup []string
}

func (c *consts) get(name string, load ...string) string {
	if r, ok := c.regs[name]; ok {
		return r
	}
	r := fmt.Sprintf("Y%d", 15-len(c.regs))
	c.regs[name] = r
	for _, l := range load {
		c.setup = append(c.setup, strings.ReplaceAll(l, "$R", r))
	}
	return r
}

// imm32 broadcasts a 32-bit pattern to every lane.
func (c *consts) imm32(v uint32) string {
	return c.get(fmt.Sprintf("imm32 %#x", v),
		fmt.Sprintf("MOVL $%#x, AX", v), "MOVQ AX, X0", "VPBROADCASTD X0, $R")
}

func (c *consts) imm64(v uint64) string {
	return c.get(fmt.Sprintf("imm64 %#x", v),
		fmt.Sprintf("MOVQ $%#x, AX", v), "MOVQ AX, X0", "VPBROADCASTQ X0, $R")
}

// scalar broadcasts the kernel's k argument (*k is one element).
func (c *consts) scalar(bcast string) string {
	return c.get("k", "MOVQ k+32(FP), R8", bcast+" (R8), $R")
}

func X(y string) string { return "X" + y[1:] }

// ---- element ops -------------------------------------------------------

func simple(instr string) op {
	return op{0, func(w *asm, x, y string, t []string) { w.i("%s %s, %s, %s", instr, y, x, x) }}
}

// floatMin is Go's min(x, y) on amd64: m1 = MIN(x, y), m2 = MIN(m1, x),
// result m1|m2 (MIN returns its second operand when either is NaN or both
// are zero, so the OR makes min(-0, +0) = -0 and lets any NaN win).
func floatMin(sfx string) op {
	return op{2, func(w *asm, x, y string, t []string) {
		w.i("VMIN%s %s, %s, %s", sfx, y, x, t[0])
		w.i("VMIN%s %s, %s, %s", sfx, x, t[0], t[1])
		w.i("VOR%s %s, %s, %s", sfx, t[0], t[1], x)
	}}
}

// floatMax is Go's max(x, y) on amd64: -min(-x, -y).
func floatMax(sfx string, c *consts, sign string) op {
	return op{3, func(w *asm, x, y string, t []string) {
		w.i("VXOR%s %s, %s, %s", sfx, sign, x, x)
		w.i("VXOR%s %s, %s, %s", sfx, sign, y, t[2])
		floatMin(sfx).emit(w, x, t[2], t)
		w.i("VXOR%s %s, %s, %s", sfx, sign, x, x)
	}}
}

// mulBytes: no byte multiply exists, so multiply the even bytes as words
// (the low byte of a word product is the byte product) and the odd bytes as
// words shifted into the high byte, then merge.
func mulBytes(c *consts) op {
	lo := c.imm32(0x00ff00ff)
	return op{2, func(w *asm, x, y string, t []string) {
		w.i("VPSRLW $8, %s, %s", x, t[0])
		w.i("VPANDN %s, %s, %s", y, lo, t[1]) // y & 0xff00
		w.i("VPMULLW %s, %s, %s", t[1], t[0], t[0])
		w.i("VPMULLW %s, %s, %s", y, x, x)
		w.i("VPAND %s, %s, %s", lo, x, x)
		w.i("VPOR %s, %s, %s", t[0], x, x)
	}}
}

// mulQuads: AVX2 has no 64-bit multiply; x*y mod 2^64 is
// lo(x)lo(y) + (hi(x)lo(y) + lo(x)hi(y)) << 32.
func mulQuads() op {
	return op{2, func(w *asm, x, y string, t []string) {
		w.i("VPSRLQ $32, %s, %s", x, t[0])
		w.i("VPMULUDQ %s, %s, %s", y, t[0], t[0])
		w.i("VPSRLQ $32, %s, %s", y, t[1])
		w.i("VPMULUDQ %s, %s, %s", x, t[1], t[1])
		w.i("VPADDQ %s, %s, %s", t[1], t[0], t[0])
		w.i("VPSLLQ $32, %s, %s", t[0], t[0])
		w.i("VPMULUDQ %s, %s, %s", y, x, x)
		w.i("VPADDQ %s, %s, %s", t[0], x, x)
	}}
}

// maxMinQuads: AVX2 compares 64-bit lanes only as signed; unsigned lanes
// are compared with their sign bits flipped.
func maxMinQuads(isMax, unsigned bool, c *consts) op {
	var flip string
	if unsigned {
		flip = c.imm64(1 << 63)
	}
	return op{3, func(w *asm, x, y string, t []string) {
		cx, cy := x, y
		if unsigned {
			w.i("VPXOR %s, %s, %s", flip, x, t[1])
			w.i("VPXOR %s, %s, %s", flip, y, t[2])
			cx, cy = t[1], t[2]
		}
		if isMax {
			w.i("VPCMPGTQ %s, %s, %s", cx, cy, t[0]) // y > x
		} else {
			w.i("VPCMPGTQ %s, %s, %s", cy, cx, t[0]) // x > y
		}
		w.i("VPBLENDVB %s, %s, %s, %s", t[0], y, x, x)
	}}
}

// ---- dtypes ------------------------------------------------------------

type elem struct {
	name  string // Go DataType constant
	bcast string // broadcast of one element (the PreMulSum scalar)
	add   string
	mul   func(c *consts) op
	max   func(c *consts) op
	min   func(c *consts) op
	float string // "PS"/"PD" for floats
}

func ints() []elem {
	s := func(i string) func(*consts) op { return func(*consts) op { return simple(i) } }
	return []elem{
		{name: "Int8", bcast: "VPBROADCASTB", add: "VPADDB", mul: mulBytes, max: s("VPMAXSB"), min: s("VPMINSB")},
		{name: "Uint8", bcast: "VPBROADCASTB", add: "VPADDB", mul: mulBytes, max: s("VPMAXUB"), min: s("VPMINUB")},
		{name: "Int32", bcast: "VPBROADCASTD", add: "VPADDD", mul: s("VPMULLD"), max: s("VPMAXSD"), min: s("VPMINSD")},
		{name: "Uint32", bcast: "VPBROADCASTD", add: "VPADDD", mul: s("VPMULLD"), max: s("VPMAXUD"), min: s("VPMINUD")},
		{name: "Int64", bcast: "VPBROADCASTQ", add: "VPADDQ", mul: func(*consts) op { return mulQuads() },
			max: func(c *consts) op { return maxMinQuads(true, false, c) }, min: func(c *consts) op { return maxMinQuads(false, false, c) }},
		{name: "Uint64", bcast: "VPBROADCASTQ", add: "VPADDQ", mul: func(*consts) op { return mulQuads() },
			max: func(c *consts) op { return maxMinQuads(true, true, c) }, min: func(c *consts) op { return maxMinQuads(false, true, c) }},
	}
}

// ---- kernels -----------------------------------------------------------

// layout says how a 32-byte-aligned block of one dtype is loaded into
// registers and stored back. Native types: one Y register per 32 bytes.
// fp16: 16 bytes widened to eight float32 by VCVTPH2PS. bf16: 32 bytes as
// two float32 registers, the even elements shifted up and the odd ones
// masked, so no lane shuffles are needed.
type layout int

const (
	native layout = iota
	f16
	bf16
)

type kernel struct {
	name        string
	nontemporal bool // non-temporal stores (dst 32-byte aligned): the "NT" twin
	// exact: the result is always one of the inputs (max, min), so bf16
	// needs no rounding, only NaN quieting.
	exact  bool
	unary  bool // d = f(s): Prepare's scale, Finalize's divide
	layout layout
	// body emits the computation on the loaded registers; it returns the op
	// so the generator can size the register groups.
	build func(c *consts) (op, func(w *asm, x, y string, t []string))
}

// groupBytes is how many input bytes one register group covers.
func (l layout) groupBytes() int {
	if l == f16 {
		return 16
	}
	return 32
}

func (l layout) regs() int {
	if l == bf16 {
		return 4 // x even, x odd, y even, y odd
	}
	return 2
}

func gen(w *asm, k kernel) {
	c := &consts{regs: map[string]string{}}
	o, body := k.build(c)
	// Layout constants (after the op's, so both share the pool).
	var hi, one, r7fff, quiet, sign, qnan string
	switch k.layout {
	case bf16:
		hi, one, r7fff, quiet = c.imm32(0xffff0000), c.imm32(1), c.imm32(0x7fff), c.imm32(0x00400000)
	case f16:
		sign, qnan = c.imm32(0x80000000), c.imm32(0x7fc00000)
	}
	narrowTemps := map[layout]int{native: 0, f16: 2, bf16: 2}[k.layout]
	per := k.layout.regs() + max(o.temps, narrowTemps)
	free := 16 - len(c.regs)
	unroll := min(4, free/per)
	if unroll < 1 {
		panic(k.name + ": out of registers")
	}
	step := k.layout.groupBytes()
	frame := 40
	if k.unary {
		frame = 32
	}
	store := "VMOVDQU"
	if k.nontemporal {
		store = "VMOVNTDQ"
	}
	fmt.Fprintf(w, "\n// func %s(d, %s *byte, n int, k *byte)\n", k.name, map[bool]string{false: "a, b", true: "s"}[k.unary])
	fmt.Fprintf(w, "TEXT ·%s(SB), NOSPLIT, $0-%d\n", k.name, frame)
	w.i("MOVQ d+0(FP), DI")
	w.i("MOVQ %s+8(FP), SI", map[bool]string{false: "a", true: "s"}[k.unary])
	if !k.unary {
		w.i("MOVQ b+16(FP), DX")
		w.i("MOVQ n+24(FP), CX")
	} else {
		w.i("MOVQ n+16(FP), CX")
	}
	for _, s := range c.setup {
		if k.unary {
			s = strings.ReplaceAll(s, "k+32(FP)", "k+24(FP)")
		}
		w.i("%s", s)
	}
	reg := func(g, j int) string { return fmt.Sprintf("Y%d", g*per+j) }
	block := func(groups int) {
		for g := range groups {
			off := g * step
			xr, yr := reg(g, 0), reg(g, 1)
			t := make([]string, per-k.layout.regs())
			for j := range t {
				t[j] = reg(g, k.layout.regs()+j)
			}
			ld := func(ptr, r string) {
				switch k.layout {
				case f16:
					w.i("VCVTPH2PS %d(%s), %s", off, ptr, r)
				default:
					w.i("VMOVDQU %d(%s), %s", off, ptr, r)
				}
			}
			ld("SI", xr)
			if !k.unary {
				ld("DX", yr)
			}
			switch k.layout {
			case native:
				body(w, xr, yr, t)
				w.i("%s %s, %d(DI)", store, xr, off)
			case f16:
				body(w, xr, yr, t)
				// F32ToF16 gives every NaN as 0x7e00|sign; the hardware
				// keeps payload bits, so canonicalise first.
				w.i("VCMPPS $3, %s, %s, %s", xr, xr, t[0]) // unordered: NaN
				w.i("VANDPS %s, %s, %s", sign, xr, t[1])
				w.i("VORPS %s, %s, %s", qnan, t[1], t[1])
				w.i("VBLENDVPS %s, %s, %s, %s", t[0], t[1], xr, xr)
				w.i("VCVTPS2PH $0, %s, %s", xr, X(xr)) // round to nearest even
				w.i("%s %s, %d(DI)", store, X(xr), off)
			case bf16:
				xo, yo := reg(g, 2), reg(g, 3)
				w.i("VPAND %s, %s, %s", hi, xr, xo)
				w.i("VPSLLD $16, %s, %s", xr, xr)
				if !k.unary {
					w.i("VPAND %s, %s, %s", hi, yr, yo)
					w.i("VPSLLD $16, %s, %s", yr, yr)
				}
				body(w, xr, yr, t)
				body(w, xo, yo, t)
				// F32ToBF16: (u + 0x7fff + bit16) >> 16, NaN as (u >> 16) | 0x40.
				for _, u := range []string{xr, xo} {
					if k.exact { // low halves are zero: only NaNs change
						w.i("VCMPPS $3, %s, %s, %s", u, u, t[1])
						w.i("VPAND %s, %s, %s", quiet, t[1], t[1])
						w.i("VPOR %s, %s, %s", t[1], u, u)
						continue
					}
					w.i("VPSRLD $16, %s, %s", u, t[0])
					w.i("VPAND %s, %s, %s", one, t[0], t[0])
					w.i("VPADDD %s, %s, %s", r7fff, t[0], t[0])
					w.i("VPADDD %s, %s, %s", u, t[0], t[0])
					w.i("VCMPPS $3, %s, %s, %s", u, u, t[1])
					w.i("VPOR %s, %s, %s", quiet, u, u)
					w.i("VPBLENDVB %s, %s, %s, %s", t[1], u, t[0], u)
				}
				w.i("VPSRLD $16, %s, %s", xr, xr)
				w.i("VPAND %s, %s, %s", hi, xo, xo)
				w.i("VPOR %s, %s, %s", xo, xr, xr)
				w.i("%s %s, %d(DI)", store, xr, off)
			}
		}
		adv := groups * step
		w.i("ADDQ $%d, SI", adv)
		if !k.unary {
			w.i("ADDQ $%d, DX", adv)
		}
		w.i("ADDQ $%d, DI", adv)
		w.i("SUBQ $%d, CX", adv)
	}
	w.i("CMPQ CX, $%d", unroll*step)
	w.i("JB one")
	fmt.Fprintln(w, "loop:")
	block(unroll)
	w.i("CMPQ CX, $%d", unroll*step)
	w.i("JAE loop")
	fmt.Fprintln(w, "one:")
	w.i("TESTQ CX, CX")
	w.i("JZ done")
	block(1)
	w.i("JMP one")
	fmt.Fprintln(w, "done:")
	if k.nontemporal {
		w.i("SFENCE") // order the non-temporal stores before whatever publishes dst
	}
	w.i("VZEROUPPER")
	w.i("RET")
}

// binary wraps an op (built with the constant pool) as a kernel body.
func binary(f func(c *consts) op) func(c *consts) (op, func(w *asm, x, y string, t []string)) {
	return func(c *consts) (op, func(w *asm, x, y string, t []string)) {
		o := f(c)
		return o, o.emit
	}
}

// preMulSum: x + k*y. Integers wrap, so the product can use mul's sequence
// on (y, k); floats round y*k before the add (no FMA). Operand order
// follows the portable loops as compiled (y*k, then product + x); it only
// matters for which NaN comes out when both operands are NaNs.
func preMulSum(e elem) func(c *consts) (op, func(w *asm, x, y string, t []string)) {
	return func(c *consts) (op, func(w *asm, x, y string, t []string)) {
		k := c.scalar(e.bcast)
		if e.float != "" {
			return op{}, func(w *asm, x, y string, t []string) {
				w.i("VMUL%s %s, %s, %s", e.float, k, y, y)
				w.i("VADD%s %s, %s, %s", e.float, x, y, x) // product first, as Go orders it
			}
		}
		m := e.mul(c)
		return m, func(w *asm, x, y string, t []string) {
			m.emit(w, y, k, t)
			w.i("%s %s, %s, %s", e.add, y, x, x)
		}
	}
}

// scale: k*s (Prepare for PreMulSum).
func scale(e elem) func(c *consts) (op, func(w *asm, x, y string, t []string)) {
	return func(c *consts) (op, func(w *asm, x, y string, t []string)) {
		k := c.scalar(e.bcast)
		if e.float != "" {
			return op{}, func(w *asm, x, y string, t []string) { w.i("VMUL%s %s, %s, %s", e.float, k, x, x) }
		}
		m := e.mul(c)
		return m, func(w *asm, x, y string, t []string) { m.emit(w, x, k, t) }
	}
}

// divideInt32: s/k for 32-bit integers through float64 (k is float64):
// exact, as |s| < 2^32 (see TestSIMDMatchesPortable), and AVX2 has no
// integer divide. Unsigned lanes are biased by 2^31 to convert as signed;
// their quotients (k >= 2) fit in int32 again.
func divideInt32(unsigned bool) func(c *consts) (op, func(w *asm, x, y string, t []string)) {
	return func(c *consts) (op, func(w *asm, x, y string, t []string)) {
		k := c.scalar("VBROADCASTSD")
		var flip, bias string
		if unsigned {
			flip, bias = c.imm32(1<<31), c.imm64(0x41e0000000000000) // 2^31 as float64
		}
		return op{temps: 2}, func(w *asm, x, y string, t []string) {
			if unsigned {
				w.i("VPXOR %s, %s, %s", flip, x, x)
			}
			w.i("VEXTRACTI128 $1, %s, %s", x, X(t[1]))
			w.i("VCVTDQ2PD %s, %s", X(x), t[0])
			w.i("VCVTDQ2PD %s, %s", X(t[1]), t[1])
			for _, r := range t[:2] {
				if unsigned {
					w.i("VADDPD %s, %s, %s", bias, r, r)
				}
				w.i("VDIVPD %s, %s, %s", k, r, r)
			}
			w.i("VCVTTPD2DQY %s, %s", t[0], X(x))
			w.i("VCVTTPD2DQY %s, %s", t[1], X(t[1]))
			w.i("VINSERTI128 $1, %s, %s, %s", X(t[1]), x, x)
		}
	}
}

// divideInt8: s/k for bytes through float32 (k is float32): exact, as
// |s| < 2^8 leaves the float32 quotient's error under 1/k. The 32 bytes are
// widened in four quarters of eight and packed back; the packs work per
// 128-bit lane, so a final dword permutation restores the order.
func divideInt8(unsigned bool) func(c *consts) (op, func(w *asm, x, y string, t []string)) {
	return func(c *consts) (op, func(w *asm, x, y string, t []string)) {
		k := c.scalar("VBROADCASTSS")
		order := c.get("dword order 0,4,1,5,2,6,3,7",
			"MOVQ $0x0703060205010400, AX", "MOVQ AX, X0", "VPMOVZXBD X0, $R")
		widen := "VPMOVSXBD"
		if unsigned {
			widen = "VPMOVZXBD"
		}
		return op{temps: 4}, func(w *asm, x, y string, t []string) {
			w.i("VEXTRACTI128 $1, %s, %s", x, X(t[2]))
			w.i("VPSRLDQ $8, %s, %s", X(x), X(t[1]))
			w.i("VPSRLDQ $8, %s, %s", X(t[2]), X(t[3]))
			w.i("%s %s, %s", widen, X(x), t[0])
			for _, r := range t[1:4] {
				w.i("%s %s, %s", widen, X(r), r)
			}
			for _, r := range t[:4] {
				w.i("VCVTDQ2PS %s, %s", r, r)
				w.i("VDIVPS %s, %s, %s", k, r, r)
				w.i("VCVTTPS2DQ %s, %s", r, r)
			}
			// Quotients of bytes by k >= 2 fit in int8: no saturation.
			w.i("VPACKSSDW %s, %s, %s", t[1], t[0], t[0])
			w.i("VPACKSSDW %s, %s, %s", t[3], t[2], t[2])
			w.i("VPACKSSWB %s, %s, %s", t[2], t[0], t[0])
			w.i("VPERMD %s, %s, %s", t[0], order, x)
		}
	}
}

// divide: s/k (Finalize for Avg), floats.
func divide(e elem) func(c *consts) (op, func(w *asm, x, y string, t []string)) {
	return func(c *consts) (op, func(w *asm, x, y string, t []string)) {
		k := c.scalar(e.bcast)
		return op{}, func(w *asm, x, y string, t []string) { w.i("VDIV%s %s, %s, %s", e.float, k, x, x) }
	}
}

type entry struct {
	dtype                       string
	sum, prod, max, min, premul string
	scale, div                  string
}

func main() {
	var s asm
	fmt.Fprint(&s, "// Code generated by kernels/gen; DO NOT EDIT.\n\n#include \"textflag.h\"\n")
	var entries []entry
	add := func(k kernel) string {
		gen(&s, k)
		if !k.unary {
			nt := k
			nt.name, nt.nontemporal = k.name+"NT", true
			gen(&s, nt)
		}
		return k.name
	}

	floats := func(sfx, bcast string) elem {
		return elem{float: sfx, bcast: bcast, add: "VADD" + sfx}
	}
	type dt struct {
		e      elem
		layout layout
	}
	all := []dt{}
	for _, e := range ints() {
		all = append(all, dt{e, native})
	}
	all = append(all,
		dt{func() elem { e := floats("PS", "VBROADCASTSS"); e.name = "Float32"; return e }(), native},
		dt{func() elem { e := floats("PD", "VBROADCASTSD"); e.name = "Float64"; return e }(), native},
		dt{func() elem { e := floats("PS", "VBROADCASTSS"); e.name = "Float16"; return e }(), f16},
		dt{func() elem { e := floats("PS", "VBROADCASTSS"); e.name = "Bfloat16"; return e }(), bf16},
	)
	for _, d := range all {
		e := d.e
		if e.float != "" {
			sfx := e.float
			e.mul = func(*consts) op { return simple("VMUL" + sfx) }
			e.max = func(c *consts) op {
				var sign string
				if sfx == "PS" {
					sign = c.imm32(0x80000000)
				} else {
					sign = c.imm64(1 << 63)
				}
				return floatMax(sfx, c, sign)
			}
			e.min = func(*consts) op { return floatMin(sfx) }
		}
		addOp := e.add
		en := entry{dtype: e.name}
		nm := func(op string) string { return "avx2" + op + e.name }
		en.sum = add(kernel{name: nm("Sum"), layout: d.layout, build: binary(func(*consts) op { return simple(addOp) })})
		en.prod = add(kernel{name: nm("Prod"), layout: d.layout, build: binary(e.mul)})
		en.max = add(kernel{name: nm("Max"), layout: d.layout, exact: true, build: binary(e.max)})
		en.min = add(kernel{name: nm("Min"), layout: d.layout, exact: true, build: binary(e.min)})
		en.premul = add(kernel{name: nm("PreMulSum"), layout: d.layout, build: preMulSum(e)})
		en.scale = add(kernel{name: nm("Scale"), unary: true, layout: d.layout, build: scale(e)})
		switch {
		case e.float != "":
			en.div = add(kernel{name: nm("Div"), unary: true, layout: d.layout, build: divide(e)})
		case e.name == "Int8" || e.name == "Uint8":
			en.div = add(kernel{name: nm("Div"), unary: true, layout: d.layout, build: divideInt8(e.name == "Uint8")})
		case e.name == "Int32" || e.name == "Uint32":
			en.div = add(kernel{name: nm("Div"), unary: true, layout: d.layout, build: divideInt32(e.name == "Uint32")})
		}
		entries = append(entries, en)
	}
	if err := os.WriteFile("avx2_amd64.s", s.Bytes(), 0o644); err != nil {
		panic(err)
	}

	var g bytes.Buffer
	fmt.Fprint(&g, "// Code generated by kernels/gen; DO NOT EDIT.\n\npackage kernels\n\nimport \"gocl/abi\"\n\n")
	for _, en := range entries {
		for _, n := range []string{en.sum, en.prod, en.max, en.min, en.premul} {
			fmt.Fprintf(&g, "//go:noescape\nfunc %s(d, a, b *byte, n int, k *byte)\n\n", n)
			fmt.Fprintf(&g, "//go:noescape\nfunc %sNT(d, a, b *byte, n int, k *byte)\n\n", n)
		}
		for _, n := range []string{en.scale, en.div} {
			if n != "" {
				fmt.Fprintf(&g, "//go:noescape\nfunc %s(d, s *byte, n int, k *byte)\n\n", n)
			}
		}
	}
	fmt.Fprint(&g, "// avx2Kernels lists the kernels per dtype; nil where there is none.\nvar avx2Kernels = [abi.NumTypes]simdSet{\n")
	for _, en := range entries {
		div := en.div
		if div == "" {
			div = "nil"
		}
		fmt.Fprintf(&g, "abi.%s: {accum: [abi.NumOps]binaryKernel{abi.Sum: %s, abi.Prod: %s, abi.Max: %s, abi.Min: %s, abi.Avg: %s}, preMulSum: %s, scale: %s, div: %s,\n",
			en.dtype, en.sum, en.prod, en.max, en.min, en.sum, en.premul, en.scale, div)
		fmt.Fprintf(&g, "accumNT: [abi.NumOps]binaryKernel{abi.Sum: %sNT, abi.Prod: %sNT, abi.Max: %sNT, abi.Min: %sNT, abi.Avg: %sNT}, preMulSumNT: %sNT},\n",
			en.sum, en.prod, en.max, en.min, en.sum, en.premul)
	}
	fmt.Fprint(&g, "}\n")
	src, err := format.Source(g.Bytes())
	if err != nil {
		panic(err)
	}
	if err := os.WriteFile("avx2_amd64.go", src, 0o644); err != nil {
		panic(err)
	}
}
