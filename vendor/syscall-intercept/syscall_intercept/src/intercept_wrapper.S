/*
 * Copyright 2016-2017, Intel Corporation
 *
 * Redistribution and use in source and binary forms, with or without
 * modification, are permitted provided that the following conditions
 * are met:
 *
 *     * Redistributions of source code must retain the above copyright
 *       notice, this list of conditions and the following disclaimer.
 *
 *     * Redistributions in binary form must reproduce the above copyright
 *       notice, this list of conditions and the following disclaimer in
 *       the documentation and/or other materials provided with the
 *       distribution.
 *
 *     * Neither the name of the copyright holder nor the names of its
 *       contributors may be used to endorse or promote products derived
 *       from this software without specific prior written permission.
 *
 * THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS
 * "AS IS" AND ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT
 * LIMITED TO, THE IMPLIED WARRANTIES OF MERCHANTABILITY AND FITNESS FOR
 * A PARTICULAR PURPOSE ARE DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT
 * OWNER OR CONTRIBUTORS BE LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL,
 * SPECIAL, EXEMPLARY, OR CONSEQUENTIAL DAMAGES (INCLUDING, BUT NOT
 * LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR SERVICES; LOSS OF USE,
 * DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND ON ANY
 * THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY, OR TORT
 * (INCLUDING NEGLIGENCE OR OTHERWISE) ARISING IN ANY WAY OUT OF THE USE
 * OF THIS SOFTWARE, EVEN IF ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.
 */

/*
 * intercept_wrapper.s -- see asm_wrapper.md
 */

/* the function in this file */
.global intercept_wrapper
.hidden intercept_wrapper
.type intercept_wrapper, @function

/* the C function in intercept.c */
.global intercept_routine
.hidden intercept_routine
.type intercept_routine, @function

/* the other C function in intercept.c, called right after cloning a thread */
.global intercept_routine_post_clone
.hidden intercept_routine_post_clone
.type intercept_routine_post_clone, @function

/* The boolean indicating whether YMM registers must saved */
.global intercept_routine_must_save_ymm
.hidden intercept_routine_must_save_ymm
.global intercept_routine_has_xinuse
.hidden intercept_routine_has_xinuse

/* madfs: the fast pass-through's tables and path checks, in intercept.c */
.global intercept_fast_arg
.hidden intercept_fast_arg
.global intercept_fast_fd_bits
.hidden intercept_fast_fd_bits
.global intercept_fast_fd_limit
.hidden intercept_fast_fd_limit
.global intercept_fast_path_pass
.hidden intercept_fast_path_pass
.global intercept_fast_cwd_path_pass
.hidden intercept_fast_cwd_path_pass

.text

/*
 * Local stack layout:
 *
 * 0x448(%rsp)  -- return address, to the generated asm wrapper
 * Arguments recieved on stack:
 * 0x450(%rsp)  -- original value of rsp
 * 0x458(%rsp)  -- address of the syscall instruction patched
 * Locals on stack:
 * 0xe8(%rsp) - 0x168(%rsp) -- saved GPRs
 * 0x200(%rsp) - 0x400(%rsp) -- saved SIMD registers
 *
 * A pointer to these saved register is passed to intercept_routine, so the
 * layout of `struct context` must match this part of the stack layout.
 *
 * Other arguments:
 * %rcx  -- which C function to call
 */
intercept_wrapper:
	.cfi_startproc

	/*
	 * madfs: the fast pass-through (intercept.c, intercept_fast_arg).
	 * A syscall the program declared it lets through when its fd or
	 * path is not one of its own returns at once with r11 = 0: the
	 * wrapper template then issues it. Only rcx and r11 are changed
	 * here, both clobbered by the syscall instruction anyway; rax, the
	 * arguments and all other registers are as they came (the path
	 * checks are C functions that save every register they use).
	 * rcx is the routine selector (0: intercept_routine).
	 */
	testq       %rcx, %rcx
	jnz         .Lfull
	cmpq        $511, %rax
	ja          .Lfull
	leaq        intercept_fast_arg (%rip), %r11
	movzbl      (%r11, %rax), %r11d
	cmpl        $1, %r11d
	je          .Lfd_rdi
	cmpl        $5, %r11d
	je          .Lfd_r8
	cmpl        $2, %r11d
	je          .Lpath_at
	cmpl        $3, %r11d
	jne         .Lfull
	/* the stack is 16-aligned after this push, as a call expects */
	pushq       %rax
	callq       intercept_fast_cwd_path_pass
	jmp         .Lpath_done
.Lpath_at:
	pushq       %rax
	callq       intercept_fast_path_pass
.Lpath_done:
	movl        %eax, %ecx
	popq        %rax
	testl       %ecx, %ecx
	jz          .Lfull_selected
	jmp         .Lpass
.Lfd_r8:
	movl        %r8d, %ecx
	jmp         .Lfd
.Lfd_rdi:
	movl        %edi, %ecx
.Lfd:
	/* a negative int fd is above the limit as a 64-bit value */
	cmpq        intercept_fast_fd_limit (%rip), %rcx
	jae         .Lpass
	movq        intercept_fast_fd_bits (%rip), %r11
	btq         %rcx, (%r11)
	jc          .Lfull_selected
.Lpass:
	xorl        %r11d, %r11d
	retq
.Lfull_selected:
	xorl        %ecx, %ecx
.Lfull:

	/*
	 * Stack size used locally: 0x448 bytes.
	 *
	 * This size assumes the stack pointer was correctly aligned before
	 * executing the call instruction calling this function. The return
	 * address pushed to the stack uses 8 bytes. This gives the equation:
	 *
	 * new_rsp = original_rsp - 8 - 0x448 == original_rsp - 0x450
	 * The number 0x450 is a multiple of 16, so the stack is still correctly
	 * aligned. It is very easy to forget about this when making changes to this
	 * code.
	 */
	subq        $0x448, %rsp
	.cfi_def_cfa_offset 0x0

	/* Save all GPRs on the stack */
	movq        %rax, 0x160 (%rsp)
	.cfi_offset 0, 0x160
	movq        %rdx, 0x158 (%rsp)
	.cfi_offset 1, 0x158
	/* rcx is already clobbered, no reason to save it */
	movq        %rbx, 0x150 (%rsp)
	.cfi_offset 3, 0x150
	movq        %rsi, 0x148 (%rsp)
	.cfi_offset 4, 0x148
	movq        %rdi, 0x140 (%rsp)
	.cfi_offset 5, 0x140
	movq        %rbp, 0x138 (%rsp)
	.cfi_offset 6, 0x138
	movq        0x450 (%rsp), %r11 /* fetch original value of rsp */
	movq        %r11, 0x130 (%rsp)
	.cfi_offset 7, 0x130
	movq        %r8, 0x128 (%rsp)
	.cfi_offset 8, 0x128
	movq        %r9, 0x120 (%rsp)
	.cfi_offset 9, 0x120
	movq        %r10, 0x118 (%rsp)
	.cfi_offset 10, -0x118
	/* r11 is already clobbered, no reason to save it */
	movq        %r12, 0x110 (%rsp)
	.cfi_offset 12, 0x110
	movq        %r13, 0x108 (%rsp)
	.cfi_offset 13, 0x108
	movq        %r14, 0x100 (%rsp)
	.cfi_offset 14, 0x100
	movq        %r15, 0xf8 (%rsp)
	.cfi_offset 15, 0xf8
	/*
	 * madfs: what the wrappers pass and expect back is stored in bundles:
	 * change it only with a new BUNDLE_VERSION (bundle.c).
	 * The wrapper passes the address of the syscall instruction
	 * it stands for (upstream: a pointer to its struct patch_desc, whose
	 * first field is that address); it is also the saved rip.
	 */
	movq        0x458 (%rsp), %r11 /* fetch the syscall site address */
	movq        %r11, 0xe8 (%rsp)
	movq        %r11, 0xf0 (%rsp)
	.cfi_offset 16, 0xf0

	/*
	 * madfs: the ymm registers' upper halves are saved only where a
	 * patched object may keep them live across a syscall (not libc
	 * built for x86-64 up to v2, see object_may_hold_ymm in intercept.c:
	 * its syscalls sit in SSE code). Otherwise xmm0-15 are saved with
	 * SSE moves, which leave the upper halves alone, and no xgetbv is
	 * needed (about 13 ns on the machine this was measured on).
	 */
	movb        intercept_routine_must_save_ymm (%rip), %al
	test        %al, %al
	jz          0f

	/*
	 * madfs: if the upper halves of the ymm registers are in their
	 * initial state (XINUSE bit 2 clear, almost always: compilers end
	 * AVX code with vzeroupper), saving xmm0-15 suffices, and no AVX
	 * instruction here leaves the upper state dirty for the program
	 * (SSE code after a dirty upper state pays a penalty).
	 * The path taken is remembered at 0x400(%rsp).
	 */
	movb        intercept_routine_has_xinuse (%rip), %al
	test        %al, %al
	jz          2f
	movq        %rcx, %r11
	movl        $1, %ecx
	xgetbv
	movq        %r11, %rcx
	testb       $4, %al
	jz          0f
2:
	movb        $1, 0x400 (%rsp)
	/*
	 * Save the YMM registers.
	 * Use vmovups. Must not use vmovaps, since 32 byte alignment is not
	 * guaranteed.
	 * One could just align the stack for this, but that would need
	 * more explanation in comments in other places about why overaligned
	 * stack is needed.
	 */
	vmovups     %ymm0, 0x3c0 (%rsp)
	vmovups     %ymm1, 0x380 (%rsp)
	vmovups     %ymm2, 0x340 (%rsp)
	vmovups     %ymm3, 0x300 (%rsp)
	vmovups     %ymm4, 0x2c0 (%rsp)
	vmovups     %ymm5, 0x280 (%rsp)
	vmovups     %ymm6, 0x240 (%rsp)
	vmovups     %ymm7, 0x200 (%rsp)
	vmovups     %ymm8, 0x3e0 (%rsp)
	vmovups     %ymm9, 0x3a0 (%rsp)
	vmovups     %ymm10, 0x360 (%rsp)
	vmovups     %ymm11, 0x320 (%rsp)
	vmovups     %ymm12, 0x2e0 (%rsp)
	vmovups     %ymm13, 0x2a0 (%rsp)
	vmovups     %ymm14, 0x260 (%rsp)
	vmovups     %ymm15, 0x220 (%rsp)
	/*
	 * madfs: clear the upper halves before running C code compiled
	 * for SSE: with them dirty, every legacy SSE instruction in the
	 * hook pays an AVX/SSE transition (measured: most of the
	 * per-syscall cost on this machine). They are restored below.
	 */
	vzeroupper
	jmp         1f

0:
	/*
	 * Save the XMM registers (madfs: all 16; upstream saved xmm0-7,
	 * but the hook, like any C function, may change all of them).
	 */
	movb        $0, 0x400 (%rsp)
	movaps      %xmm0, 0x3c0 (%rsp)
	movaps      %xmm1, 0x380 (%rsp)
	movaps      %xmm2, 0x340 (%rsp)
	movaps      %xmm3, 0x300 (%rsp)
	movaps      %xmm4, 0x2c0 (%rsp)
	movaps      %xmm5, 0x280 (%rsp)
	movaps      %xmm6, 0x240 (%rsp)
	movaps      %xmm7, 0x200 (%rsp)
	movaps      %xmm8, 0x3e0 (%rsp)
	movaps      %xmm9, 0x3a0 (%rsp)
	movaps      %xmm10, 0x360 (%rsp)
	movaps      %xmm11, 0x320 (%rsp)
	movaps      %xmm12, 0x2e0 (%rsp)
	movaps      %xmm13, 0x2a0 (%rsp)
	movaps      %xmm14, 0x260 (%rsp)
	movaps      %xmm15, 0x220 (%rsp)

1:
	/* argument passed to intercept_routine */
	leaq        0xe8 (%rsp), %rdi

	cmp         $0x1, %rcx /* which function should be called? */
	je          0f
	call        intercept_routine
	jmp         1f
0:	call        intercept_routine_post_clone
1:
	/*
	 * At this point, the return value of the C
	 * function (a struct wrapper_ret instance) is in rax, rdx.
	 *
	 * This function doesn't use these values for anything, just
	 * forwards them to the higher level wrapper function, generated
	 * from the template.
	 */

	movq        %rdx, %r11
	/*
	 * At this point, the return values of this asm function
	 * are in rax, r11.
	 *
	 * Restore the other registers, and return.
	 */

	movb        0x400 (%rsp), %dl
	test        %dl, %dl
	jz          0f

	vmovups     0x3c0 (%rsp), %ymm0
	vmovups     0x380 (%rsp), %ymm1
	vmovups     0x340 (%rsp), %ymm2
	vmovups     0x300 (%rsp), %ymm3
	vmovups     0x2c0 (%rsp), %ymm4
	vmovups     0x280 (%rsp), %ymm5
	vmovups     0x240 (%rsp), %ymm6
	vmovups     0x200 (%rsp), %ymm7
	vmovups     0x3e0 (%rsp), %ymm8
	vmovups     0x3a0 (%rsp), %ymm9
	vmovups     0x360 (%rsp), %ymm10
	vmovups     0x320 (%rsp), %ymm11
	vmovups     0x2e0 (%rsp), %ymm12
	vmovups     0x2a0 (%rsp), %ymm13
	vmovups     0x260 (%rsp), %ymm14
	vmovups     0x220 (%rsp), %ymm15
	jmp         1f

0:
	movaps      0x3c0 (%rsp), %xmm0
	movaps      0x380 (%rsp), %xmm1
	movaps      0x340 (%rsp), %xmm2
	movaps      0x300 (%rsp), %xmm3
	movaps      0x2c0 (%rsp), %xmm4
	movaps      0x280 (%rsp), %xmm5
	movaps      0x240 (%rsp), %xmm6
	movaps      0x200 (%rsp), %xmm7
	movaps      0x3e0 (%rsp), %xmm8
	movaps      0x3a0 (%rsp), %xmm9
	movaps      0x360 (%rsp), %xmm10
	movaps      0x320 (%rsp), %xmm11
	movaps      0x2e0 (%rsp), %xmm12
	movaps      0x2a0 (%rsp), %xmm13
	movaps      0x260 (%rsp), %xmm14
	movaps      0x220 (%rsp), %xmm15

1:
	movq        0x158 (%rsp), %rdx
	movq        0x150 (%rsp), %rbx
	movq        0x148 (%rsp), %rsi
	movq        0x140 (%rsp), %rdi
	movq        0x138 (%rsp), %rbp
	movq        0x128 (%rsp), %r8
	movq        0x120 (%rsp), %r9
	movq        0x118 (%rsp), %r10
	movq        0x110 (%rsp), %r12
	movq        0x108 (%rsp), %r13
	movq        0x100 (%rsp), %r14
	movq        0xf8 (%rsp), %r15

	addq        $0x448, %rsp

	retq
	.cfi_endproc
