/*
 * Copyright 2016-2020, Intel Corporation
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
 * intercept.h - a few declarations used in libsyscall_intercept
 */

#ifndef INTERCEPT_INTERCEPT_H
#define INTERCEPT_INTERCEPT_H

#include <stdbool.h>
#include <elf.h>
#include <unistd.h>
#include <dlfcn.h>
#include <link.h>

#include "disasm_wrapper.h"

extern bool debug_dumps_on;
void debug_dump(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#define INTERCEPTOR_EXIT_CODE 111

__attribute__((noreturn)) void xabort_errno(int error_code, const char *msg);

__attribute__((noreturn)) void xabort(const char *msg);

void xabort_on_syserror(long syscall_result, const char *msg);

struct syscall_desc {
	int nr;
	long args[6];
};

struct range {
	unsigned char *address;
	size_t size;
};

/*
 * The patch_list array stores some information on
 * whereabouts of patches made to glibc.
 * The syscall_addr pointer points to where a syscall
 *  instruction originally resided in glibc.
 * The asm_wrapper pointer points to the function
 *  called from glibc.
 * The glibc_call_patch pointer points to the exact
 *  location, where the new call instruction should
 *  be written.
 */
struct patch_desc {
	/* the original syscall instruction */
	unsigned char *syscall_addr;

	const char *containing_lib_path;

	/* the offset of the original syscall instruction */
	unsigned long syscall_offset;

	/* the new asm wrapper created */
	unsigned char *asm_wrapper;

	/* the first byte overwritten in the code */
	unsigned char *dst_jmp_patch;

	/* the address to jump back to */
	unsigned char *return_address;

	/*
	 * Describe up to three instructions surrounding the original
	 * syscall instructions. Sometimes just overwritting the two
	 * direct neighbors of the syscall is not enough, ( e.g. if
	 * both the directly preceding, and the directly following are
	 * single byte instruction, that only gives 4 bytes of space ).
	 */
	struct intercept_disasm_result preceding_ins_2;
	struct intercept_disasm_result preceding_ins;
	struct intercept_disasm_result following_ins;
	bool uses_prev_ins_2;
	bool uses_prev_ins;
	bool uses_next_ins;

	bool uses_nop_trampoline;

	struct range nop_trampoline;

	/*
	 * madfs: the syscall number every path to the site sets (the
	 * instruction before it is `mov $nr, %eax` and no jump lands on the
	 * syscall), or -1 (see site_known_nr)
	 */
	int32_t known_nr;
};

/*
 * A section_list struct contains information about sections where
 * libsyscall_intercept looks for jump destinations among symbol addresses.
 * Generally, only two sections are used for this, so 16 should be enough
 * for the maximum number of headers to be stored.
 *
 * See the calls to the add_table_info routine in the intercept_desc.c source
 * file.
 */
struct section_list {
	Elf64_Half count;
	Elf64_Shdr headers[0x10];
};

struct intercept_desc {
	/*
	 * delta between vmem addresses and addresses in symbol tables,
	 * non-zero for dynamic objects
	 */
	unsigned char *base_addr;

	/* where the object is in fs */
	const char *path;

	/*
	 * Some sections of the library from which information
	 * needs to be extracted.
	 * The text section is where the code to be hotpatched
	 * resides.
	 * The symtab, and dynsym sections provide information on
	 * the whereabouts of symbols, whose address in the text
	 * section.
	 */
	Elf64_Half text_section_index;
	Elf64_Shdr sh_text_section;

	/* Where the text starts inside the shared object */
	unsigned long text_offset;

	/*
	 * Where the text starts and ends in the virtual memory seen by the
	 * current process.
	 */
	unsigned char *text_start;
	unsigned char *text_end;


	struct patch_desc *items;
	unsigned count;
	unsigned char *jump_table;

	/*
	 * madfs: after a patch-site cache hit jump_table points into the
	 * read-only cache mapping; jumps marked later (the patcher's return
	 * addresses) go to this sorted list instead of dirtying its pages.
	 */
	const unsigned char **late_jumps;
	size_t late_jump_count;
	size_t late_jump_max;

	size_t nop_count;
	size_t max_nop_count;
	struct range *nop_table;

	/*
	 * madfs: the wrapper region (see allocate_wrapper_region in
	 * intercept_desc.c): one page holding the address of
	 * intercept_wrapper, then the per-site wrappers, all within 32-bit
	 * reach of every byte of the object, so that its text jumps straight
	 * to them and they reach back with relative jumps.
	 */
	unsigned char *region;
	size_t region_size;
	unsigned char *next_wrapper;
	/* the end of the object's highest segment */
	unsigned char *obj_end;
	/* the region sits where every process puts it first */
	bool region_canonical;
	/* some wrapper holds an absolute address: not for the bundle */
	bool position_dependent;
	/* mapped from a bundle (bundle.c): nothing left to patch */
	bool bundled;
	/* the bundle found was not usable at all: to be replaced */
	bool bundle_stale;
	/*
	 * madfs: the object as dl_iterate_phdr described it, kept for
	 * mapping its bundle once the iteration is over (intercept.c)
	 */
	struct dl_phdr_info info;
	/*
	 * mapped from a bundle with its deferred sites unpatched (lean):
	 * the full text, mapped aside until madfs_intercept_patch_deferred
	 * moves it over [deferred_at, deferred_at + deferred_len); else NULL
	 */
	unsigned char *deferred;
	unsigned char *deferred_at;
	size_t deferred_len;
	/* the object's GNU build id (in its mapped notes), or none */
	const unsigned char *build_id;
	size_t build_id_len;

	/*
	 * madfs: the library file's identity (fstat), and whether the
	 * patches came from a patch plan (see plan_load in intercept_desc.c):
	 * then every decision of create_patch_wrappers is already made.
	 */
	uint64_t file_id[5];
	bool planned;
};

void plan_store(const struct intercept_desc *desc);
int cache_dir(char *out, size_t size);
uint64_t plan_hash(void);
int write_all(long fd, const void *buf, size_t len);
long tmp_create(const char *path, char *tmp, size_t size);
void tmp_publish(long fd, bool ok, const char *tmp, const char *path);

bool has_jump(const struct intercept_desc *desc, unsigned char *addr);
bool intercept_filtering(void);
int32_t site_known_nr(const struct intercept_desc *desc,
	const unsigned char *addr, const struct intercept_disasm_result *prev);
void mark_jump(const struct intercept_desc *desc, const unsigned char *addr);
void mark_return(struct intercept_desc *desc, const unsigned char *addr);

void allocate_wrapper_region(struct intercept_desc *desc);
unsigned char *wrapper_region_guess(const struct intercept_desc *desc);
bool wrapper_region_in_reach(const struct intercept_desc *desc,
	const unsigned char *region, size_t size);
int cache_dir_name(char *out, size_t size);
unsigned cache_uid(void);
bool put_str(char **p, const char *end, const char *s);
bool put_num(char **p, const char *end, uint64_t v, bool hex);
void find_syscalls(struct intercept_desc *desc);

void init_patcher(void);
extern bool intercept_cpu_has_ymm;
extern bool intercept_routine_must_save_ymm;
void create_patch_wrappers(struct intercept_desc *desc);
void finish_wrapper_region(struct intercept_desc *desc);
void set_wrapper_slot(unsigned char *region);
uint64_t wrapper_template_hash(void);
/* madfs: FNV-1a, word-wise (patcher.c), for the cache's names */
uint64_t fnv1a(uint64_t hash, const unsigned char *bytes, size_t len);

#ifndef PT_GNU_PROPERTY
#define PT_GNU_PROPERTY 0x6474e553
#endif

/* bundle.c */
const unsigned char *find_gnu_note(const struct dl_phdr_info *info,
	Elf64_Word p_type, Elf64_Word n_type, size_t *desc_size);
void find_build_id(struct intercept_desc *desc,
	const struct dl_phdr_info *info);
int bundle_map(struct intercept_desc *desc, const struct dl_phdr_info *info);
void bundle_store(const struct intercept_desc *desc,
	unsigned char *first_page, size_t len);
int bundle_patch_deferred(struct intercept_desc *desc);
/* madfs_intercept_patch_deferred was called: no site is deferred any more */
extern bool intercept_no_deferral;
bool patch_deferrable(const struct patch_desc *patch);

/*
 * Actually overwrite instructions in glibc.
 */
void activate_patches(struct intercept_desc *desc);

#define SYSCALL_INS_SIZE 2
#define JUMP_INS_SIZE 5
#define CALL_OPCODE 0xe8
#define JMP_OPCODE 0xe9
#define SHORT_JMP_OPCODE 0xeb
#define PUSH_IMM_OPCODE 0x68
#define NOP_OPCODE 0x90
#define INT3_OPCODE 0xCC

bool is_overwritable_nop(const struct intercept_disasm_result *ins);

void create_jump(unsigned char opcode, unsigned char *from, void *to);

extern const char *cmdline;

#define PAGE_SIZE ((size_t)0x1000)

static inline unsigned char *
round_down_address(unsigned char *address)
{
	return (unsigned char *)(((uintptr_t)address) & ~(PAGE_SIZE - 1));
}

/* The size of an asm wrapper instance */
extern size_t asm_wrapper_tmpl_size;

/*
 * madfs: the most bytes a wrapper adds to the template: up to three
 * relocated instructions (15 bytes each at most), the jump back and
 * the fd or path prefix (intercept_template.S, 96 bytes at most)
 */
#define WRAPPER_EXTRA_BYTES 160

/* madfs: what the wrappers call, through the region's first page */
extern unsigned char intercept_wrapper;

/*
 * madfs: the syscalls whose first argument is a file descriptor the
 * program lets through when it is not one of its own, 512 bits, defined by
 * the program (madfs_intercept::fd_first_set!). Their sites with a known
 * number get the fd prefix (intercept_template.S). Absent: none do.
 */
extern const uint64_t madfs_intercept_fd_first[8] __attribute__((weak));

/* madfs: is nr in a program's 512-bit syscall set (absent: no)? */
static inline bool
syscall_in_set(const uint64_t *set, long nr)
{
	return set != NULL && nr >= 0 && nr < 512 &&
	    (set[nr / 64] >> (nr % 64) & 1) != 0;
}

/*
 * madfs: the syscalls whose first two arguments are a (dirfd, path) pair
 * the program lets through when the path is relative and the dirfd is not
 * one of its own (or AT_FDCWD while its working directory is not), defined
 * by the program (madfs_intercept::dirfd_path_set!). Their sites with a
 * known number get the path prefix (intercept_template.S). Absent: none do.
 */
extern const uint64_t madfs_intercept_dirfd_path[8] __attribute__((weak));

/*
 * madfs: the same for syscalls whose first argument is a path relative to
 * the working directory (madfs_intercept::cwd_path_set!).
 */
extern const uint64_t madfs_intercept_cwd_path[8] __attribute__((weak));

/*
 * madfs: what the fd and path prefixes read, through the region's first
 * page: an fd below limit whose bit in bits is clear is not the
 * program's; nor is the working directory while *cwd_host is nonzero.
 * limit stays 0 (everything goes on to the template) until
 * madfs_intercept_fast_pass enables it. Its layout is read by the
 * prefixes' code: change it only with a new BUNDLE_VERSION.
 */
struct intercept_fast_prefix {
	uint64_t limit;
	const uint64_t *bits;
	const volatile unsigned char *cwd_host;
	/*
	 * the mount's second byte (0 for a mount of one byte): an absolute
	 * path whose second byte is neither this nor 'p' is not the
	 * program's
	 */
	uint64_t mount1;
};
extern struct intercept_fast_prefix intercept_fast_prefix;

static inline size_t
page_up(size_t n)
{
	return (n + PAGE_SIZE - 1) & ~(PAGE_SIZE - 1);
}

#endif
