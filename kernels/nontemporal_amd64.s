#include "textflag.h"

// func copyNT(d, s *byte, n int)
// n is a multiple of 32 and d is 32-byte aligned; no fence (see sfence).
TEXT ·copyNT(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ n+16(FP), CX
	CMPQ CX, $128
	JB one
loop:
	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	VMOVNTDQ Y0, 0(DI)
	VMOVNTDQ Y1, 32(DI)
	VMOVNTDQ Y2, 64(DI)
	VMOVNTDQ Y3, 96(DI)
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $128, CX
	CMPQ CX, $128
	JAE loop
one:
	TESTQ CX, CX
	JZ done
	VMOVDQU 0(SI), Y0
	VMOVNTDQ Y0, 0(DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $32, CX
	JMP one
done:
	VZEROUPPER
	RET

// func sfence()
TEXT ·sfence(SB), NOSPLIT, $0-0
	SFENCE
	RET
