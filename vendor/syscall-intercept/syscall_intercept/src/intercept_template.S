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
 * intercept_template.s -- see asm_wrapper.md
 */

.global intercept_asm_wrapper_tmpl;
.hidden intercept_asm_wrapper_tmpl;
.global intercept_asm_wrapper_site_disp;
.hidden intercept_asm_wrapper_site_disp;
.global intercept_asm_wrapper_slot_disp;
.hidden intercept_asm_wrapper_slot_disp;
.global intercept_asm_wrapper_tmpl_end;
.hidden intercept_asm_wrapper_tmpl_end;

.text

/*
 * Locals on the stack:
 * 0(%rsp) the original value of %rsp, in the code around the syscall
 * 8(%rsp) the address of the syscall instruction this wrapper stands for
 *
 * madfs: a copy of this template lives in the object's wrapper region,
 * within 32-bit reach of the object (patcher.c, create_wrapper), and holds
 * no absolute address: the site address is a RIP-relative lea into the
 * object's text, and intercept_wrapper is called through the pointer in
 * the region's first page. Copies are therefore the same in every process
 * that puts the region at the same distance from the object, and are
 * shared through the bundle file (bundle.c).
 *
 * The %rcx register controls which C function to call in intercept.c:
 *
 * if %rcx == 0 then call intercept_routine
 * if %rcx == 1 then intercept_routine_post_clone
 *
 * This value in %rcx is passed to the function intercep_wrapper.
 *
 *
 * Note: the subq instruction allocating stack for locals must not
 * ruin the stack alignment. It must round up the number of bytes
 * needed for locals.
 */
intercept_asm_wrapper_tmpl:
	movq        $0x0, %rcx /* choose intercept_routine */

0:	movq        %rsp, %r11 /* remember original rsp */
	subq        $0x80, %rsp  /* avoid the red zone */
	andq        $-16, %rsp /* align the stack */
	subq        $0x20, %rsp /* allocate stack for some locals */
	movq        %r11, (%rsp) /* orignal rsp on stack */
	/* leaq site(%rip), %r11 -- the displacement is filled in */
	.byte       0x4c, 0x8d, 0x1d
intercept_asm_wrapper_site_disp:
	.long       0
	movq        %r11, 0x8 (%rsp) /* site address on stack */
	/* callq *slot(%rip) -- call intercept_wrapper */
	.byte       0xff, 0x15
intercept_asm_wrapper_slot_disp:
	.long       0
	movq        (%rsp), %rsp /* restore original rsp */
	/*
	 * The intercept_wrapper function did restore all registers to their
	 * original state, except for rax, rsp, rip, and r11.
	 *
	 * If r11 is zero, rax contains a syscall number, and that syscall
	 *  is executed here.
	 * If r11 is 1, rax contains the return value of the hooked syscall.
	 * If r11 is 2, a clone syscall is executed here.
	 */
	cmp         $0x0, %r11
	je          2f
	cmp         $0x1, %r11
	je          3f
	cmp         $0x2, %r11
	je          1f

	hlt /* r11 value is invalid? */

1:
	/* execute the clone syscall in its original context */
	syscall
	movq        $0x1, %rcx /* choose intercept_routine_post_clone */
	/*
	 * Now goto 0, and call the C function named
	 * intercept_routine_post_clone both in the parent thread, adn the
	 * child thread.
	 */
	jmp         0b

2:
	syscall
3:
intercept_asm_wrapper_tmpl_end:
	/*
	 * This template must be appended here with the relocated
	 * instruction following the syscall, if any, and a jump back to
	 * the intercepted code.
	 */

/*
 * madfs: the fd prefix. For a site whose syscall number is known at patch
 * time (`mov $nr, %eax` right before it, no jump onto the syscall) and
 * whose first argument is a file descriptor the program declared it lets
 * through (madfs_intercept_fd_first), create_wrapper puts this before the
 * template: it issues the syscall itself when the fd is below the limit
 * and its bit in the program's bitmap is clear, and jumps over the
 * template to the code after it (the relocated following instruction and
 * the jump back). Everything else -- a negative fd, one at or above the
 * limit (0 while the fast pass is off), one of the program's -- goes on
 * into the template, which decides as before. Only rcx and r11 change,
 * both clobbered by the syscall anyway. The region's first page holds,
 * after intercept_wrapper's address, the address of
 * intercept_fast_prefix: { limit, bits } (intercept.c).
 */
.global intercept_asm_fd_prefix;
.hidden intercept_asm_fd_prefix;
.global intercept_asm_fd_prefix_slot_disp;
.hidden intercept_asm_fd_prefix_slot_disp;
.global intercept_asm_fd_prefix_post_disp;
.hidden intercept_asm_fd_prefix_post_disp;
.global intercept_asm_fd_prefix_end;
.hidden intercept_asm_fd_prefix_end;

intercept_asm_fd_prefix:
	/* movq slot+8(%rip), %rcx -- the displacement is filled in */
	.byte       0x48, 0x8b, 0x0d
intercept_asm_fd_prefix_slot_disp:
	.long       0
	movl        %edi, %r11d /* the fd, as an unsigned int */
	cmpq        (%rcx), %r11
	jae         1f
	movq        8(%rcx), %rcx
	btq         %r11, (%rcx)
	jc          1f
	syscall
	/* jmp post -- over the template; the displacement is filled in */
	.byte       0xe9
intercept_asm_fd_prefix_post_disp:
	.long       0
1:
intercept_asm_fd_prefix_end:

/*
 * madfs: the path prefixes. For a site whose syscall number is known and
 * whose path the program lets through when it is not its own, as the fd
 * prefix above: intercept_asm_path_prefix for a (dirfd, path) pair in the
 * first two arguments (madfs_intercept_dirfd_path), intercept_asm_cwd_prefix
 * for a path in the first one, relative to the working directory
 * (madfs_intercept_cwd_path). Each issues the syscall itself and jumps over
 * the template when the path is
 *  - relative (or empty) and the dirfd is below the limit with its bit
 *    clear, or is the working directory (AT_FDCWD) while *cwd_host is
 *    nonzero;
 *  - absolute and its second byte is neither the mount's second byte
 *    (mount1) nor 'p' (/proc/self/fd/ may name one of the program's fds):
 *    then it is under neither.
 * A null path, every other absolute one (the template's fast pass compares
 * it with the whole mount), a dirfd of the program's, a negative one other
 * than AT_FDCWD, and every call while the limit is 0 go on into the
 * template. Only rcx and r11 change. intercept_fast_prefix:
 * { limit, bits, cwd_host, mount1 } (intercept.c).
 */
.global intercept_asm_path_prefix;
.hidden intercept_asm_path_prefix;
.global intercept_asm_path_prefix_slot_disp;
.hidden intercept_asm_path_prefix_slot_disp;
.global intercept_asm_path_prefix_post_disp;
.hidden intercept_asm_path_prefix_post_disp;
.global intercept_asm_path_prefix_end;
.hidden intercept_asm_path_prefix_end;

intercept_asm_path_prefix:
	/* movq slot+8(%rip), %rcx -- the displacement is filled in */
	.byte       0x48, 0x8b, 0x0d
intercept_asm_path_prefix_slot_disp:
	.long       0
	cmpq        $0, (%rcx)
	je          1f
	testq       %rsi, %rsi
	jz          1f
	cmpb        $0x2f, (%rsi) /* '/' */
	je          2f
	cmpl        $-100, %edi /* AT_FDCWD */
	je          4f
	movl        %edi, %r11d /* the dirfd, as an unsigned int */
	cmpq        (%rcx), %r11
	jae         1f
	movq        8(%rcx), %rcx
	btq         %r11, (%rcx)
	jc          1f
3:
	syscall
	/* jmp post -- over the template; the displacement is filled in */
	.byte       0xe9
intercept_asm_path_prefix_post_disp:
	.long       0
4:
	movq        16(%rcx), %r11
	cmpb        $0, (%r11)
	jne         3b
	jmp         1f
2:
	movzbl      1(%rsi), %r11d
	cmpb        %r11b, 24(%rcx)
	je          1f
	cmpb        $0x70, %r11b /* 'p' */
	jne         3b
1:
intercept_asm_path_prefix_end:

.global intercept_asm_cwd_prefix;
.hidden intercept_asm_cwd_prefix;
.global intercept_asm_cwd_prefix_slot_disp;
.hidden intercept_asm_cwd_prefix_slot_disp;
.global intercept_asm_cwd_prefix_post_disp;
.hidden intercept_asm_cwd_prefix_post_disp;
.global intercept_asm_cwd_prefix_end;
.hidden intercept_asm_cwd_prefix_end;

intercept_asm_cwd_prefix:
	/* movq slot+8(%rip), %rcx -- the displacement is filled in */
	.byte       0x48, 0x8b, 0x0d
intercept_asm_cwd_prefix_slot_disp:
	.long       0
	cmpq        $0, (%rcx)
	je          1f
	testq       %rdi, %rdi
	jz          1f
	cmpb        $0x2f, (%rdi) /* '/' */
	je          2f
	movq        16(%rcx), %r11
	cmpb        $0, (%r11)
	je          1f
3:
	syscall
	/* jmp post -- over the template; the displacement is filled in */
	.byte       0xe9
intercept_asm_cwd_prefix_post_disp:
	.long       0
2:
	movzbl      1(%rdi), %r11d
	cmpb        %r11b, 24(%rcx)
	je          1f
	cmpb        $0x70, %r11b /* 'p' */
	jne         3b
1:
intercept_asm_cwd_prefix_end:
