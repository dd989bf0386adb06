//go:build linux && amd64

#include "textflag.h"

// func cloneWaiter(flags, stack, ppid uintptr) (pid, errno uintptr)
TEXT ·cloneWaiter(SB),NOSPLIT|NOFRAME,$0-40
	MOVQ	flags+0(FP), DI
	MOVQ	stack+8(FP), SI
	MOVQ	ppid+16(FP), R12
	XORQ	DX, DX
	XORQ	R10, R10
	XORQ	R8, R8
	MOVQ	$56, AX // SYS_clone
	SYSCALL
	CMPQ	AX, $0
	JEQ	child
	CMPQ	AX, $0xfffffffffffff001
	JLS	ok
	MOVQ	$-1, pid+24(FP)
	NEGQ	AX
	MOVQ	AX, errno+32(FP)
	RET
ok:
	MOVQ	AX, pid+24(FP)
	MOVQ	$0, errno+32(FP)
	RET

// The child: registers only, no stack, no memory.
child:
	MOVQ	$1, DI // PR_SET_PDEATHSIG
	MOVQ	$9, SI // SIGKILL
	MOVQ	$157, AX // SYS_prctl
	SYSCALL
	MOVQ	$110, AX // SYS_getppid
	SYSCALL
	CMPQ	AX, R12
	JNE	exit
pause:
	MOVQ	$34, AX // SYS_pause
	SYSCALL
	JMP	pause
exit:
	MOVQ	$0, DI
	MOVQ	$60, AX // SYS_exit
	SYSCALL
	JMP	exit
