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

#include <assert.h>
#include <syscall.h>
#include <unistd.h>
#include <fcntl.h>
#include <stdint.h>
#include <inttypes.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/auxv.h>

#include "intercept.h"
#include "intercept_util.h"
#include "disasm_wrapper.h"

/*
 * open_orig_file
 *
 * Instead of looking for the needed metadata in already mmap library,
 * all this information is read from the file, thus its original place,
 * the file where the library is in an FS. The loaded library is mmaped
 * already of course, but not necessarily the whole file is mapped as one
 * readable mem mapping -- only some segments are present in memory, but
 * information about the file's sections, and the sections themselves might
 * only be present in the original file.
 * Note on naming: memory has segments, the object file has sections.
 */
static int
open_orig_file(const struct intercept_desc *desc)
{
	int fd;

	fd = syscall_no_intercept(SYS_open, desc->path, O_RDONLY);

	xabort_on_syserror(fd, __func__);

	return fd;
}

static void
add_table_info(struct section_list *list, const Elf64_Shdr *header)
{
	size_t max = sizeof(list->headers) / sizeof(list->headers[0]);

	if (list->count < max) {
		list->headers[list->count] = *header;
		list->count++;
	} else {
		xabort("allocated section_list exhausted");
	}
}

/*
 * add_text_info -- Fill the appropriate fields in an intercept_desc struct
 * about the corresponding code text.
 */
static void
add_text_info(struct intercept_desc *desc, const Elf64_Shdr *header,
		Elf64_Half index)
{
	desc->text_offset = header->sh_offset;
	desc->text_start = desc->base_addr + header->sh_addr;
	desc->text_end = desc->text_start + header->sh_size - 1;
	desc->text_section_index = index;
}

/*
 * find_sections
 *
 * See: man elf
 */
static void
find_sections(struct intercept_desc *desc, int fd,
	struct section_list *symbol_tables, struct section_list *rela_tables)
{
	Elf64_Ehdr elf_header;

	symbol_tables->count = 0;
	rela_tables->count = 0;

	xread(fd, &elf_header, sizeof(elf_header));

	Elf64_Shdr sec_headers[elf_header.e_shnum];

	xlseek(fd, elf_header.e_shoff, SEEK_SET);
	xread(fd, sec_headers, elf_header.e_shnum * sizeof(Elf64_Shdr));

	char sec_string_table[sec_headers[elf_header.e_shstrndx].sh_size];

	xlseek(fd, sec_headers[elf_header.e_shstrndx].sh_offset, SEEK_SET);
	xread(fd, sec_string_table,
	    sec_headers[elf_header.e_shstrndx].sh_size);

	bool text_section_found = false;

	for (Elf64_Half i = 0; i < elf_header.e_shnum; ++i) {
		const Elf64_Shdr *section = &sec_headers[i];
		char *name = sec_string_table + section->sh_name;

		debug_dump("looking at section: \"%s\" type: %ld\n",
		    name, (long)section->sh_type);
		if (strcmp(name, ".text") == 0) {
			text_section_found = true;
			add_text_info(desc, section, i);
		} else if (section->sh_type == SHT_SYMTAB ||
		    section->sh_type == SHT_DYNSYM) {
			debug_dump("found symbol table: %s\n", name);
			add_table_info(symbol_tables, section);
		} else if (section->sh_type == SHT_RELA) {
			debug_dump("found relocation table: %s\n", name);
			add_table_info(rela_tables, section);
		}
	}

	if (!text_section_found)
		xabort("text section not found");
}

/*
 * allocate_jump_table
 *
 * Allocates a bitmap, where each bit represents a unique address in
 * the text section.
 */
static void
allocate_jump_table(struct intercept_desc *desc)
{
	/* How many bytes need to be addressed? */
	assert(desc->text_start < desc->text_end);
	size_t bytes = (size_t)(desc->text_end - desc->text_start + 1);

	/* Allocate 1 bit for each addressable byte */
	/* Plus one -- integer division can result a number too low */
	desc->jump_table = xmmap_anon(bytes / 8 + 1);
}

/*
 * calculate_table_count - estimate the number of entries
 * that might be used for nop table.
 */
static size_t
calculate_table_count(const struct intercept_desc *desc)
{
	assert(desc->text_start < desc->text_end);

	/* how large is the text segment? */
	size_t bytes = (size_t)(desc->text_end - desc->text_start + 1);

	/*
	 * Guess: one entry per 64 bytes of machine code.
	 * This would result in zero entries for 63 bytes of text segment,
	 * so it is safer to have an absolute minimum. The 0x10000 value
	 * is just an arbitrary value.
	 * If more nops than this estimate are found (not likely), than the
	 * code just continues without remembering those nops - this does
	 * not break the patching process.
	 */
	if (bytes > 0x10000)
		return bytes / 64;
	else
		return 1024;
}

/*
 * allocate_nop_table - allocates desc->nop_table
 */
static void
allocate_nop_table(struct intercept_desc *desc)
{
	desc->max_nop_count = calculate_table_count(desc);
	desc->nop_count = 0;
	desc->nop_table =
	    xmmap_anon(desc->max_nop_count * sizeof(desc->nop_table[0]));
}

/*
 * mark_nop - mark an address in a text section as overwritable nop instruction
 */
static void
mark_nop(struct intercept_desc *desc, unsigned char *address, size_t size)
{
	if (desc->nop_count == desc->max_nop_count)
		return;

	desc->nop_table[desc->nop_count].address = address;
	desc->nop_table[desc->nop_count].size = size;
	desc->nop_count++;
}

/*
 * is_bit_set - check a bit in a bitmap
 */
static bool
is_bit_set(const unsigned char *table, uint64_t offset)
{
	return table[offset / 8] & (1 << (offset % 8));
}

/*
 * set_bit - set a bit in a bitmap
 */
static void
set_bit(unsigned char *table, uint64_t offset)
{
	unsigned char tmp = (unsigned char)(1 << (offset % 8));
	table[offset / 8] |= tmp;
}

/*
 * has_jump - check if addr is known to be a destination of any
 * jump ( or subroutine call ) in the code. The address must be
 * the one seen by the current process, not the offset in the original
 * ELF file.
 */
bool
has_jump(const struct intercept_desc *desc, unsigned char *addr)
{
	if (addr < desc->text_start || addr > desc->text_end)
		return false;
	if (is_bit_set(desc->jump_table, (uint64_t)(addr - desc->text_start)))
		return true;
	/* binary search in the late marks (madfs) */
	size_t lo = 0, hi = desc->late_jump_count;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (desc->late_jumps[mid] == addr)
			return true;
		if (desc->late_jumps[mid] < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return false;
}

/*
 * mark_jump - Mark an address as a jump destination, see has_jump above.
 */
void
mark_jump(const struct intercept_desc *desc, const unsigned char *addr)
{
	if (addr >= desc->text_start && addr <= desc->text_end)
		set_bit(desc->jump_table, (uint64_t)(addr - desc->text_start));
}

/*
 * mark_return - the patcher marks the address a patch returns to (madfs:
 * into desc->late_jumps after a cache hit, the bitmap is read only then).
 */
void
mark_return(struct intercept_desc *desc, const unsigned char *addr)
{
	if (addr < desc->text_start || addr > desc->text_end)
		return;
	if (desc->late_jumps == NULL) {
		mark_jump(desc, addr);
		return;
	}
	/* sorted insert (the patcher marks in ascending order) */
	if (desc->late_jump_count == desc->late_jump_max)
		xabort("too many late jump marks");
	size_t i = desc->late_jump_count++;
	while (i > 0 && desc->late_jumps[i - 1] > addr) {
		desc->late_jumps[i] = desc->late_jumps[i - 1];
		--i;
	}
	desc->late_jumps[i] = addr;
}

/*
 * find_jumps_in_section_syms
 *
 * Read the .symtab or .dynsym section, which stores an array of Elf64_Sym
 * structs. Some of these symbols are functions in the .text section,
 * thus their entry points are jump destinations.
 *
 * The st_value fields holds the virtual address of the symbol
 * relative to the base address.
 *
 * The format of the entries:
 *
 * typedef struct
 * {
 *   Elf64_Word	st_name;            Symbol name (string tbl index)
 *   unsigned char st_info;         Symbol type and binding
 *   unsigned char st_other;        Symbol visibility
 *   Elf64_Section st_shndx;        Section index
 *   Elf64_Addr	st_value;           Symbol value
 *   Elf64_Xword st_size;           Symbol size
 * } Elf64_Sym;
 *
 * The field st_value is offset of the symbol in the object file.
 */
static void
find_jumps_in_section_syms(struct intercept_desc *desc, Elf64_Shdr *section,
				int fd)
{
	assert(section->sh_type == SHT_SYMTAB ||
		section->sh_type == SHT_DYNSYM);

	size_t sym_count = section->sh_size / sizeof(Elf64_Sym);

	Elf64_Sym syms[sym_count];

	xlseek(fd, section->sh_offset, SEEK_SET);
	xread(fd, &syms, section->sh_size);

	for (size_t i = 0; i < sym_count; ++i) {
		if (ELF64_ST_TYPE(syms[i].st_info) != STT_FUNC)
			continue; /* it is not a function */

		if (syms[i].st_shndx != desc->text_section_index)
			continue; /* it is not in the text section */

		debug_dump("jump target: %lx\n",
		    (unsigned long)syms[i].st_value);

		unsigned char *address = desc->base_addr + syms[i].st_value;

		/* a function entry point in .text, mark it */
		mark_jump(desc, address);

		/* a function's end in .text, mark it */
		if (syms[i].st_size != 0)
			mark_jump(desc, address + syms[i].st_size);
	}
}

/*
 * find_jumps_in_section_rela - look for offsets in relocation entries
 *
 * The constant SHT_RELA refers to "Relocation entries with addends" -- see the
 * elf.h header file.
 *
 * The format of the entries:
 *
 * typedef struct
 * {
 *   Elf64_Addr	r_offset;      Address
 *   Elf64_Xword r_info;       Relocation type and symbol index
 *   Elf64_Sxword r_addend;    Addend
 * } Elf64_Rela;
 *
 */
static void
find_jumps_in_section_rela(struct intercept_desc *desc, Elf64_Shdr *section,
				int fd)
{
	assert(section->sh_type == SHT_RELA);

	size_t sym_count = section->sh_size / sizeof(Elf64_Rela);

	Elf64_Rela syms[sym_count];

	xlseek(fd, section->sh_offset, SEEK_SET);
	xread(fd, &syms, section->sh_size);

	for (size_t i = 0; i < sym_count; ++i) {
		switch (ELF64_R_TYPE(syms[i].r_info)) {
			case R_X86_64_RELATIVE:
			case R_X86_64_RELATIVE64:
				/* Relocation type: "Adjust by program base" */

				debug_dump("jump target: %lx\n",
				    (unsigned long)syms[i].r_addend);

				unsigned char *address =
				    desc->base_addr + syms[i].r_addend;

				mark_jump(desc, address);

				break;
		}
	}
}

/*
 * has_pow2_count
 * Checks if the positive number of patches in a struct intercept_desc
 * is a power of two or not.
 */
static bool
has_pow2_count(const struct intercept_desc *desc)
{
	return (desc->count & (desc->count - 1)) == 0;
}

/*
 * add_new_patch
 * Acquires a new patch entry, and allocates memory for it if
 * needed.
 */
static struct patch_desc *
add_new_patch(struct intercept_desc *desc)
{
	if (desc->count == 0) {

		/* initial allocation */
		desc->items = xmmap_anon(sizeof(desc->items[0]));

	} else if (has_pow2_count(desc)) {

		/* if count is a power of two, double the allocate space */
		size_t size = desc->count * sizeof(desc->items[0]);

		desc->items = xmremap(desc->items, size, 2 * size);
	}

	return &(desc->items[desc->count++]);
}

/*
 * is_overwritable_nop
 * Check if an instruction just disassembled is a NOP that can be
 * used for placing an extra jump instruction into it.
 * See the nop_trampoline usage in the patcher.c source file.
 * This instruction is usable only if it occupies at least seven bytes.
 * Two are needed for a short jump, and another 5 bytes for a trampoline
 * jump with 32 bit displacement.
 *
 * As in (where XXXX represents a 32 bit displacement):
 *                                Before      After
 *                                _______     _______
 * address of NOP instruction ->  | NOP |     | JMP | <- jumps to next
 *                                |     |     | +8  |     instruction
 *                                |     |     | JMP | <- 5 bytes of payload
 *                                |     |     |  X  |
 *                                |     |     |  X  |
 *                                |     |     |  X  |
 *                                |     |     |  X  |
 *                                |     |     |     |
 * address of next instruction -> -------     -------
 *
 */
bool
is_overwritable_nop(const struct intercept_disasm_result *ins)
{
	return ins->is_nop && ins->length >= 2 + 5;
}

/*
 * crawl_text
 * Crawl the text section, disassembling it all.
 * This routine collects information about potential addresses to patch.
 *
 * The addresses of all syscall instructions are stored, together with
 * a description of the preceding, and following instructions.
 *
 * A lookup table of all addresses which appear as jump destination is
 * generated, to help determine later, whether an instruction is suitable
 * for being overwritten -- of course, if an instruction is a jump destination,
 * it can not be merged with the preceding instruction to create a
 * new larger one.
 *
 * Note: The actual patching can not yet be done in this disassembling phase,
 * as it is not known in advance, which addresses are jump destinations.
 *
 * madfs: false, with nothing found, if there is no disassembler
 * (intercept_disasm_unavailable).
 */
static bool
crawl_text(struct intercept_desc *desc)
{
	unsigned char *code = desc->text_start;

	/*
	 * Remember the previous three instructions, while
	 * disassembling the code instruction by instruction in the
	 * while loop below.
	 */
	struct intercept_disasm_result prevs[3] = {{0, }};

	/*
	 * How many previous instructions were decoded before this one,
	 * and stored in the prevs array. Usually three, except for the
	 * beginning of the text section -- the first instruction naturally
	 * has no previous instruction.
	 */
	unsigned has_prevs = 0;
	struct intercept_disasm_context *context =
	    intercept_disasm_init(desc->text_start, desc->text_end);
	if (context == NULL)
		return false;

	while (code <= desc->text_end) {
		struct intercept_disasm_result result;

		result = intercept_disasm_next_instruction(context, code);

		if (result.length == 0) {
			++code;
			continue;
		}

		if (result.has_ip_relative_opr)
			mark_jump(desc, result.rip_ref_addr);

		if (is_overwritable_nop(&result))
			mark_nop(desc, code, result.length);

		/*
		 * Generate a new patch description, if:
		 * - Information is available about a syscalls place
		 * - one following instruction
		 * - two preceding instructions
		 *
		 * So this is done only if instruction in the previous
		 * loop iteration was a syscall. Which means the currently
		 * decoded instruction is the 'following' instruction -- as
		 * in following the syscall.
		 * The two instructions from two iterations ago, and three
		 * iterations ago are going to be the two 'preceding'
		 * instructions stored in the patch description. Other fields
		 * of the struct patch_desc are not filled at this point yet.
		 *
		 * prevs[0]      ->     patch->preceding_ins_2
		 * prevs[1]      ->     patch->preceding_ins
		 * prevs[2]      ->     [syscall]
		 * current ins.  ->     patch->following_ins
		 *
		 *
		 * XXX -- this ignores the cases where the text section
		 * starts, or ends with a syscall instruction, or indeed, if
		 * the second instruction in the text section is a syscall.
		 * These implausible edge cases don't seem to be very important
		 * right now.
		 */
		if (has_prevs >= 1 && prevs[2].is_syscall) {
			struct patch_desc *patch = add_new_patch(desc);

			patch->containing_lib_path = desc->path;
			patch->preceding_ins_2 = prevs[0];
			patch->preceding_ins = prevs[1];
			patch->following_ins = result;
			patch->syscall_addr = code - SYSCALL_INS_SIZE;

			ptrdiff_t syscall_offset = patch->syscall_addr -
			    (desc->text_start - desc->text_offset);

			assert(syscall_offset >= 0);

			patch->syscall_offset = (unsigned long)syscall_offset;
		}

		prevs[0] = prevs[1];
		prevs[1] = prevs[2];
		prevs[2] = result;
		if (has_prevs < 2)
			++has_prevs;

		code += result.length;
	}

	intercept_disasm_destroy(context);
	return true;
}

/*
 * get_min_address
 * Looks for the lowest address that might be mmap-ed. This is
 * useful while looking for space for a trampoline table close
 * to some text section.
 */
static uintptr_t
get_min_address(void)
{
	static uintptr_t min_address;

	if (min_address != 0)
		return min_address;

	min_address = 0x10000; /* best guess */

	int fd = syscall_no_intercept(SYS_open, "/proc/sys/vm/mmap_min_addr",
					O_RDONLY);

	if (fd >= 0) {
		char line[64];
		ssize_t r;
		r = syscall_no_intercept(SYS_read, fd, line, sizeof(line) - 1);
		if (r > 0) {
			line[r] = '\0';
			min_address = (uintptr_t)atoll(line);
		}

		syscall_no_intercept(SYS_close, fd);
	}

	return min_address;
}

/*
 * madfs: the wrapper region replaces upstream's trampoline table and its
 * 1 MiB wrapper array in the library's BSS. Upstream's patched text
 * jumped to a trampoline near the text, which jumped (absolute) to the
 * site's wrapper far away, which called intercept_wrapper (absolute) and
 * jumped (absolute) back. Now the wrappers themselves sit within 32-bit
 * reach of the whole object: the text jumps straight to them, they jump
 * back relatively and reach intercept_wrapper through a pointer in the
 * region's first page. A wrapper then holds no absolute address, so the
 * wrappers of a region at the same distance from the object are the same
 * bytes in every process, which is what lets the bundle (bundle.c) carry
 * them.
 *
 * The region is placed at the lowest address from which the end of the
 * object is within reach (free in practically every process: the kernel
 * maps libraries near the top of the address space), as a hint; if the
 * kernel places it elsewhere, that is used if the object is in reach, and
 * /proc/self/maps is read to find a gap only if not.
 */
#define REGION_REACH ((uintptr_t)INT32_MAX - 0x10000)

unsigned char *
wrapper_region_guess(const struct intercept_desc *desc)
{
	uintptr_t end = (uintptr_t)desc->obj_end;
	/* well above any mmap_min_addr, no need to read it */
	if (end < REGION_REACH + 0x100000)
		return NULL;
	return (unsigned char *)page_up(end - REGION_REACH);
}

bool
wrapper_region_in_reach(const struct intercept_desc *desc,
	const unsigned char *region, size_t size)
{
	uintptr_t r = (uintptr_t)region;
	uintptr_t end = (uintptr_t)desc->obj_end;
	uintptr_t text = (uintptr_t)desc->text_start;
	return (end < REGION_REACH || r >= end - REGION_REACH) &&
	    r + size <= text + REGION_REACH && r + size > r;
}

static unsigned char *
region_try(const struct intercept_desc *desc, unsigned char *at,
	size_t size, int flags)
{
	long m = syscall_no_intercept(SYS_mmap, at, size,
	    PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | flags,
	    -1, 0);
	if (m < 0 && m > -4096)
		return NULL;
	unsigned char *t = (unsigned char *)m;
	if (wrapper_region_in_reach(desc, t, size))
		return t;
	syscall_no_intercept(SYS_munmap, t, size);
	return NULL;
}

/* a gap of size bytes in reach of the object, from /proc/self/maps */
static unsigned char *
region_scan(const struct intercept_desc *desc, size_t size)
{
	unsigned char *guess = wrapper_region_guess(desc);
	if (guess == NULL)
		guess = (unsigned char *)page_up(get_min_address());

	FILE *maps;
	char line[0x2000];

	if ((maps = fopen("/proc/self/maps", "r")) == NULL)
		xabort("fopen /proc/self/maps");

	while ((fgets(line, sizeof(line), maps)) != NULL) {
		unsigned char *start;
		unsigned char *end;

		if (sscanf(line, "%p-%p", (void **)&start, (void **)&end) != 2)
			xabort("sscanf from /proc/self/maps");

		if (end < guess)
			continue; /* No overlap, let's see the next mapping */

		if (start >= guess + size)
			break; /* The rest of the mappings can't overlap */

		/* The next guess is the page following this mapping */
		guess = end;
	}

	fclose(maps);

	if (!wrapper_region_in_reach(desc, guess, size))
		xabort("unable to find place for the wrapper region");
	return region_try(desc, guess, size, MAP_FIXED);
}

/*
 * allocate_wrapper_region
 * Maps the region (read-write until finish_wrapper_region) for the
 * wrappers of desc's patches, see above.
 */
void
allocate_wrapper_region(struct intercept_desc *desc)
{
	size_t size = PAGE_SIZE + page_up((size_t)desc->count *
	    (asm_wrapper_tmpl_size + WRAPPER_EXTRA_BYTES));
	unsigned char *guess = wrapper_region_guess(desc);
	unsigned char *t = region_try(desc, guess, size, 0);

	desc->region_canonical = t != NULL && t == guess;
	if (t == NULL)
		t = region_scan(desc, size);
	if (t == NULL)
		xabort("unable to allocate the wrapper region");
	desc->region = t;
	desc->region_size = size;
	desc->next_wrapper = t + PAGE_SIZE;
}

/*
 * madfs patch: a per-user cache of what crawl_text and the
 * symbol/relocation scans find.
 *
 * Disassembling all of libc with capstone costs about 0.15-0.2 s of
 * CPU in every process started under LD_PRELOAD. The result depends
 * only on the library file, so it is stored in a file keyed by the
 * library's device, inode, size and mtime, with every address kept as
 * an offset from the start of the text section (the library is mapped
 * elsewhere in each process). The cache directory is
 * $MADFS_INTERCEPT_CACHE, or /tmp/.madfs-intercept-<uid>; it must
 * belong to the user and not be writable by others, or it is not used.
 */
/*
 * madfs: the set of syscall numbers the program wants to see, 512 bits,
 * defined by the program (madfs_intercept::syscall_set!). Absent: every
 * site is patched.
 */
extern const uint64_t madfs_intercept_syscalls[8] __attribute__((weak));
static int filtering_on(void);

/*
 * intercept_filtering - whether the program's wanted set is in force
 * (filtering_on, read once). Without it (MADFS_INTERCEPT_ALL, a diagnostic
 * mode) no site is trusted to have a known number: neither dropped nor
 * given the fd prefix (patcher.c).
 */
bool
intercept_filtering(void)
{
	static int filtering = -1;
	if (filtering < 0)
		filtering = filtering_on();
	return filtering != 0;
}

/*
 * site_known_nr - the number of the syscall at addr, preceded by prev, when
 * every path to it sets the same one: the instruction before it is
 * `mov $imm32, %eax` (b8 imm32) and no jump lands on the syscall
 * instruction, so nothing else can reach it with another number; -1 if
 * not known. Needs the jump bitmap (not for a planned patch: the plan
 * stores the answer).
 */
int32_t
site_known_nr(const struct intercept_desc *desc, const unsigned char *addr,
		const struct intercept_disasm_result *prev)
{
	if (prev->length != 5 || prev->address == NULL ||
	    prev->address + 5 != addr || prev->address[0] != 0xb8 ||
	    has_jump(desc, (unsigned char *)addr))
		return -1;
	uint32_t nr;
	memcpy(&nr, prev->address + 1, sizeof(nr));
	return nr < 512 ? (int32_t)nr : -1;
}

/*
 * unwanted_site - whether the syscall at addr, preceded by prev, has a known
 * number (site_known_nr) that the program does not want. Such
 * sites are left unpatched: those syscalls cost nothing extra and their
 * pages of libc stay shared. clone3 is always wanted (the hook turns it into
 * ENOSYS, see crates/intercept). MADFS_INTERCEPT_ALL set to anything, or no
 * set defined, patches every site.
 */
static bool
unwanted_site(const struct intercept_desc *desc, const unsigned char *addr,
		const struct intercept_disasm_result *prev)
{
	if (!intercept_filtering())
		return false;
	int32_t nr = site_known_nr(desc, addr, prev);
	return nr >= 0 && nr != SYS_clone3 &&
	    (madfs_intercept_syscalls[nr / 64] &
	    ((uint64_t)1 << (nr % 64))) == 0;
}

/*
 * filter_patches - drops the unwanted sites (after a full scan; a cache hit
 * drops them while loading).
 */
static void
filter_patches(struct intercept_desc *desc)
{
	unsigned kept = 0;
	for (unsigned i = 0; i < desc->count; ++i) {
		const struct patch_desc *p = desc->items + i;
		if (unwanted_site(desc, p->syscall_addr, &p->preceding_ins))
			continue;
		if (kept != i)
			desc->items[kept] = *p;
		++kept;
	}
	desc->count = kept;
}

#define CACHE_MAGIC "MADFSIC1"

struct cache_header {
	char magic[8];
	uint64_t dev, ino, size, mtime_s, mtime_ns;
	uint64_t text_offset, text_bytes;
	uint32_t sizeof_result, sizeof_range;
	uint64_t count, nop_count, jump_bytes;
};

struct cached_result {
	struct intercept_disasm_result r;
	int64_t address_off;
	int64_t rip_ref_off;
	uint8_t has_address;
	uint8_t has_rip_ref;
};

struct cached_patch {
	uint64_t syscall_off;
	uint64_t syscall_offset;
	struct cached_result prev2, prev, next;
};

/*
 * madfs: appends the C string s at *p, with room up to end; false if it
 * does not fit (with its NUL)
 */
bool
put_str(char **p, const char *end, const char *s)
{
	size_t n = strlen(s);
	if ((size_t)(end - *p) <= n)
		return false;
	memcpy(*p, s, n + 1);
	*p += n;
	return true;
}

/* appends v in decimal (hex: in hexadecimal), as put_str */
bool
put_num(char **p, const char *end, uint64_t v, bool hex)
{
	char digits[24];
	char *d = digits + sizeof(digits);
	unsigned base = hex ? 16 : 10;
	*--d = '\0';
	do {
		*--d = "0123456789abcdef"[v % base];
		v /= base;
	} while (v != 0);
	return put_str(p, end, d);
}

/*
 * madfs: the user whose cache is used: the real uid, from the auxiliary
 * vector (no syscall; the same as getuid() at start)
 */
unsigned
cache_uid(void)
{
	return (unsigned)getauxval(AT_UID);
}

/*
 * madfs: the cache directory's name, not checked (bundle.c checks the file
 * it opens there instead, see bundle_map). No snprintf: at a bundle hit
 * nothing else in the process start needs printf's code pages.
 */
int
cache_dir_name(char *out, size_t size)
{
	/*
	 * no cache in a setuid/setgid (secure-exec) process: the files
	 * come from the real user
	 */
	if (getauxval(AT_SECURE) != 0)
		return -1;
	const char *env = madfs_intercept_getenv("MADFS_INTERCEPT_CACHE");
	char *p = out;
	const char *end = out + size;
	if (env != NULL && env[0] != '\0')
		return put_str(&p, end, env) ? 0 : -1;
	return put_str(&p, end, "/tmp/.madfs-intercept-") &&
	    put_num(&p, end, cache_uid(), false) ? 0 : -1;
}

static int
cache_dir_find(char *out, size_t size)
{
	if (cache_dir_name(out, size) != 0)
		return -1;
	struct stat st;
	if (syscall_no_intercept(SYS_stat, out, &st) != 0) {
		(void) syscall_no_intercept(SYS_mkdir, out, 0700);
		if (syscall_no_intercept(SYS_stat, out, &st) != 0)
			return -1;
	}
	if (!S_ISDIR(st.st_mode) || st.st_uid != cache_uid() ||
	    (st.st_mode & 022) != 0)
		return -1;
	return 0;
}

/*
 * madfs: the cache directory, looked up (and made) once per process: the
 * site cache, the plan and the image all live there, and the constructor
 * runs single-threaded.
 */
int
cache_dir(char *out, size_t size)
{
	static char dir[512];
	static int state; /* 0: not looked up, 1: usable, -1: not */
	if (state == 0)
		state = cache_dir_find(dir, sizeof(dir)) == 0 ? 1 : -1;
	if (state < 0 || strlen(dir) >= size)
		return -1;
	memcpy(out, dir, strlen(dir) + 1);
	return 0;
}

static int
cache_file_path(const struct cache_header *h, char *out, size_t size)
{
	char dir[512];
	if (cache_dir(dir, sizeof(dir)) != 0)
		return -1;
	int n = snprintf(out, size, "%s/%" PRIx64 "-%" PRIx64 "-%" PRIx64
	    "-%" PRIx64 ".%" PRIx64, dir, h->dev, h->ino, h->size,
	    h->mtime_s, h->mtime_ns);
	return (n <= 0 || (size_t)n >= size) ? -1 : 0;
}

static void
cache_key(const struct intercept_desc *desc, int fd, struct cache_header *h)
{
	struct stat st;
	memset(h, 0, sizeof(*h));
	if (syscall_no_intercept(SYS_fstat, fd, &st) != 0)
		return;
	memcpy(h->magic, CACHE_MAGIC, 8);
	h->dev = (uint64_t)st.st_dev;
	h->ino = (uint64_t)st.st_ino;
	h->size = (uint64_t)st.st_size;
	h->mtime_s = (uint64_t)st.st_mtim.tv_sec;
	h->mtime_ns = (uint64_t)st.st_mtim.tv_nsec;
	h->text_offset = desc->text_offset;
	h->text_bytes = (uint64_t)(desc->text_end - desc->text_start + 1);
	h->sizeof_result = (uint32_t)sizeof(struct cached_result);
	h->sizeof_range = (uint32_t)sizeof(struct range);
}

static void
pack_result(const struct intercept_desc *desc,
		const struct intercept_disasm_result *r,
		struct cached_result *c)
{
	memset(c, 0, sizeof(*c));
	c->r = *r;
	c->r.address = NULL;
	c->r.rip_ref_addr = NULL;
#ifndef NDEBUG
	c->r.mnemonic = NULL;
#endif
	if (r->address != NULL) {
		c->has_address = 1;
		c->address_off = r->address - desc->text_start;
	}
	if (r->rip_ref_addr != NULL) {
		c->has_rip_ref = 1;
		c->rip_ref_off = r->rip_ref_addr - desc->text_start;
	}
}

static void
unpack_result(const struct intercept_desc *desc,
		const struct cached_result *c,
		struct intercept_disasm_result *r)
{
	*r = c->r;
	r->address = c->has_address ? desc->text_start + c->address_off : NULL;
	r->rip_ref_addr =
	    c->has_rip_ref ? desc->text_start + c->rip_ref_off : NULL;
#ifndef NDEBUG
	r->mnemonic = "(cached)";
#endif
}

int
write_all(long fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len > 0) {
		long n = syscall_no_intercept(SYS_write, fd, p, len);
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/*
 * madfs: the cache files are written under a temporary name (path.<pid>)
 * and renamed into place, so a reader sees a whole file or none.
 * tmp_create returns the descriptor, or -1; tmp_publish closes it and
 * renames the file if everything was written, or removes it.
 */
long
tmp_create(const char *path, char *tmp, size_t size)
{
	if (snprintf(tmp, size, "%s.%ld", path,
	    syscall_no_intercept(SYS_getpid)) >= (int)size)
		return -1;
	long fd = syscall_no_intercept(SYS_open, tmp,
	    O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	return fd < 0 ? -1 : fd;
}

void
tmp_publish(long fd, bool ok, const char *tmp, const char *path)
{
	syscall_no_intercept(SYS_close, fd);
	if (ok)
		ok = syscall_no_intercept(SYS_rename, tmp, path) == 0;
	if (!ok)
		syscall_no_intercept(SYS_unlink, tmp);
}

/*
 * Fills desc from the cache; returns 0 on success (then nothing else
 * needs scanning).
 */
static int
cache_load(struct intercept_desc *desc, const struct cache_header *key)
{
	char path[768];
	if (key->magic[0] == '\0' || cache_file_path(key, path, sizeof(path)))
		return -1;
	long fd = syscall_no_intercept(SYS_open, path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	struct stat st;
	if (syscall_no_intercept(SYS_fstat, fd, &st) != 0 ||
	    (size_t)st.st_size < sizeof(struct cache_header)) {
		syscall_no_intercept(SYS_close, fd);
		return -1;
	}
	size_t len = (size_t)st.st_size;
	long m = syscall_no_intercept(SYS_mmap, NULL, len, PROT_READ,
	    MAP_PRIVATE, fd, 0);
	syscall_no_intercept(SYS_close, fd);
	if (m < 0 && m > -4096)
		return -1;
	const unsigned char *base = (const unsigned char *)m;
	const struct cache_header *h = (const void *)base;
	size_t want = sizeof(*h) + h->jump_bytes +
	    h->nop_count * 2 * sizeof(uint64_t) +
	    h->count * sizeof(struct cached_patch);
	int ok = memcmp(h->magic, key->magic, 8) == 0 &&
	    h->dev == key->dev && h->ino == key->ino &&
	    h->size == key->size && h->mtime_s == key->mtime_s &&
	    h->mtime_ns == key->mtime_ns &&
	    h->text_offset == key->text_offset &&
	    h->text_bytes == key->text_bytes &&
	    h->sizeof_result == key->sizeof_result &&
	    h->sizeof_range == key->sizeof_range &&
	    h->jump_bytes == h->text_bytes / 8 + 1 &&
	    h->nop_count <= desc->max_nop_count &&
	    h->count < (1u << 24) && want == len;
	const unsigned char *p = base + sizeof(*h);
	/*
	 * madfs: the jump-target bitmap is used in place, read only (later
	 * marks go to desc->late_jumps), not copied into anonymous memory;
	 * the mapping stays for the life of the process.
	 */
	const unsigned char *jumps = p;
	if (ok)
		p += h->jump_bytes;
	for (uint64_t i = 0; ok && i < h->nop_count; ++i) {
		uint64_t v[2];
		memcpy(v, p, sizeof(v));
		p += sizeof(v);
		ok = v[0] < h->text_bytes;
		desc->nop_table[i].address = desc->text_start + v[0];
		desc->nop_table[i].size = v[1];
	}
	if (ok && h->count > 0)
		/* one allocation, not add_new_patch's doubling */
		desc->items = xmmap_anon(h->count * sizeof(desc->items[0]));
	desc->jump_table = (unsigned char *)jumps;
	unsigned kept = 0;
	for (uint64_t i = 0; ok && i < h->count; ++i) {
		struct cached_patch cp; /* memcpy: p is not aligned */
		memcpy(&cp, p, sizeof(cp));
		p += sizeof(cp);
		ok = cp.syscall_off < h->text_bytes;
		if (!ok)
			break;
		struct intercept_disasm_result prev;
		unsigned char *addr = desc->text_start + cp.syscall_off;
		unpack_result(desc, &cp.prev, &prev);
		if (unwanted_site(desc, addr, &prev))
			continue;
		struct patch_desc *patch = desc->items + kept++;
		patch->containing_lib_path = desc->path;
		patch->syscall_addr = addr;
		patch->syscall_offset = cp.syscall_offset;
		patch->preceding_ins = prev;
		unpack_result(desc, &cp.prev2, &patch->preceding_ins_2);
		unpack_result(desc, &cp.next, &patch->following_ins);
	}
	if (!ok) {
		desc->jump_table = NULL;
		syscall_no_intercept(SYS_munmap, base, len);
		if (desc->items != NULL && h->count > 0)
			syscall_no_intercept(SYS_munmap, desc->items,
			    h->count * sizeof(desc->items[0]));
		/* start over: scan as if there were no cache */
		desc->items = NULL;
		desc->nop_count = 0;
		desc->count = 0;
		return -1;
	}
	desc->nop_count = h->nop_count;
	desc->count = kept;
	desc->late_jump_max = desc->count + 1;
	desc->late_jumps = xmmap_anon(desc->late_jump_max *
	    sizeof(desc->late_jumps[0]));
	return 0;
}

static void
cache_store(const struct intercept_desc *desc, struct cache_header *key)
{
	char path[768], tmp[800];
	if (key->magic[0] == '\0' || cache_file_path(key, path, sizeof(path)))
		return;
	long fd = tmp_create(path, tmp, sizeof(tmp));
	if (fd < 0)
		return;
	key->count = desc->count;
	key->nop_count = desc->nop_count;
	key->jump_bytes = key->text_bytes / 8 + 1;
	int ok = write_all((int)fd, key, sizeof(*key)) == 0 &&
	    write_all((int)fd, desc->jump_table, key->jump_bytes) == 0;
	for (size_t i = 0; ok && i < desc->nop_count; ++i) {
		const struct range *nop = desc->nop_table + i;
		uint64_t v[2] = {
			(uint64_t)(nop->address - desc->text_start),
			(uint64_t)nop->size };
		ok = write_all((int)fd, v, sizeof(v)) == 0;
	}
	for (unsigned i = 0; ok && i < desc->count; ++i) {
		const struct patch_desc *p = desc->items + i;
		struct cached_patch cp;
		memset(&cp, 0, sizeof(cp));
		cp.syscall_off = (uint64_t)(p->syscall_addr - desc->text_start);
		cp.syscall_offset = p->syscall_offset;
		pack_result(desc, &p->preceding_ins_2, &cp.prev2);
		pack_result(desc, &p->preceding_ins, &cp.prev);
		pack_result(desc, &p->following_ins, &cp.next);
		ok = write_all((int)fd, &cp, sizeof(cp)) == 0;
	}
	tmp_publish(fd, ok, tmp, path);
}


/*
 * madfs: the patch plan -- what create_patch_wrappers decided for every
 * site that is patched (after unwanted sites were dropped): the bytes
 * overwritten, the NOP used as a trampoline, the address returned to, and
 * the instructions relocated into the wrapper. It depends on the library
 * file and on the wanted set, so a process that finds its plan skips the
 * ELF section scan, the patch-site cache with its NOP table and jump
 * bitmap, and every decision: it only creates the wrappers and writes the
 * jumps. Stored next to the patch-site cache after the first process that
 * patched without one; any mismatch or short file is ignored.
 */
#define PLAN_MAGIC "MADFSPL4"

struct plan_header {
	char magic[8];
	uint64_t file_id[5];
	uint64_t wanted[8];
	uint64_t filtering;
	uint64_t fd_first[8];
	uint32_t sizeof_result, sizeof_patch;
	uint64_t text_addr, text_offset, text_bytes;
	uint64_t count;
};

struct planned_patch {
	uint64_t syscall_off, syscall_offset;
	uint64_t dst_jmp_off, return_off, nop_off, nop_size;
	uint8_t uses_prev_ins_2, uses_prev_ins, uses_next_ins, uses_nop;
	int32_t known_nr;
	struct cached_result prev2, prev, next;
};

static int
filtering_on(void)
{
	const char *all = madfs_intercept_getenv("MADFS_INTERCEPT_ALL");
	return madfs_intercept_syscalls != NULL &&
	    (all == NULL || all[0] == '\0');
}

/*
 * a zeroed header with the wanted set, whether it filters, and the
 * syscalls that get the fd prefix (patcher.c): the patch decisions
 * depend on all three
 */
static void
wanted_key(struct plan_header *h)
{
	memset(h, 0, sizeof(*h));
	h->filtering = (uint64_t)filtering_on();
	if (h->filtering)
		memcpy(h->wanted, madfs_intercept_syscalls, sizeof(h->wanted));
	if (madfs_intercept_fd_first != NULL)
		memcpy(h->fd_first, madfs_intercept_fd_first,
		    sizeof(h->fd_first));
}

/* the header every plan of this library and wanted set must carry */
static int
plan_key(const struct intercept_desc *desc, struct plan_header *h)
{
	wanted_key(h);
	if (desc->file_id[0] == 0 && desc->file_id[1] == 0)
		return -1;
	memcpy(h->magic, PLAN_MAGIC, 8);
	memcpy(h->file_id, desc->file_id, sizeof(h->file_id));
	h->sizeof_result = (uint32_t)sizeof(struct cached_result);
	h->sizeof_patch = (uint32_t)sizeof(struct planned_patch);
	return 0;
}

/* FNV-1a of the wanted set, whether it filters and the fd-first set */
static uint64_t
wanted_hash(const struct plan_header *h)
{
	size_t n = sizeof(h->wanted) + sizeof(h->filtering) +
	    sizeof(h->fd_first);
	return fnv1a(1469598103934665603ULL,
	    (const unsigned char *)h->wanted, n);
}

uint64_t
plan_hash(void)
{
	struct plan_header h;
	wanted_key(&h);
	return wanted_hash(&h);
}

static int
plan_path(const struct plan_header *h, char *out, size_t size)
{
	char dir[512];
	if (cache_dir(dir, sizeof(dir)) != 0)
		return -1;
	uint64_t hash = wanted_hash(h);
	int n = snprintf(out, size, "%s/%" PRIx64 "-%" PRIx64 "-%" PRIx64
	    "-%" PRIx64 ".%" PRIx64 ".plan4-%" PRIx64, dir, h->file_id[0],
	    h->file_id[1], h->file_id[2], h->file_id[3], h->file_id[4], hash);
	return (n <= 0 || (size_t)n >= size) ? -1 : 0;
}

static int
plan_load(struct intercept_desc *desc, int fd)
{
	struct stat st;
	if (syscall_no_intercept(SYS_fstat, fd, &st) != 0)
		return -1;
	desc->file_id[0] = (uint64_t)st.st_dev;
	desc->file_id[1] = (uint64_t)st.st_ino;
	desc->file_id[2] = (uint64_t)st.st_size;
	desc->file_id[3] = (uint64_t)st.st_mtim.tv_sec;
	desc->file_id[4] = (uint64_t)st.st_mtim.tv_nsec;

	struct plan_header key;
	char path[768];
	if (plan_key(desc, &key) || plan_path(&key, path, sizeof(path)))
		return -1;
	long pfd = syscall_no_intercept(SYS_open, path, O_RDONLY | O_CLOEXEC);
	if (pfd < 0)
		return -1;
	struct stat pst;
	long m = -1;
	if (syscall_no_intercept(SYS_fstat, pfd, &pst) == 0 &&
	    (size_t)pst.st_size >= sizeof(struct plan_header))
		m = syscall_no_intercept(SYS_mmap, NULL, (size_t)pst.st_size,
		    PROT_READ, MAP_PRIVATE | MAP_POPULATE, pfd, 0);
	syscall_no_intercept(SYS_close, pfd);
	if (m < 0 && m > -4096)
		return -1;
	size_t len = (size_t)pst.st_size;
	const unsigned char *base = (const unsigned char *)m;
	const struct plan_header *h = (const void *)base;
	int ok = memcmp(h->magic, key.magic, 8) == 0 &&
	    memcmp(h->file_id, key.file_id, sizeof(key.file_id)) == 0 &&
	    memcmp(h->wanted, key.wanted, sizeof(key.wanted)) == 0 &&
	    h->filtering == key.filtering &&
	    memcmp(h->fd_first, key.fd_first, sizeof(key.fd_first)) == 0 &&
	    h->sizeof_result == key.sizeof_result &&
	    h->sizeof_patch == key.sizeof_patch &&
	    h->count > 0 && h->count < (1u << 20) &&
	    len == sizeof(*h) + h->count * sizeof(struct planned_patch);
	if (ok) {
		desc->text_offset = h->text_offset;
		desc->text_start = desc->base_addr + h->text_addr;
		desc->text_end = desc->text_start + h->text_bytes - 1;
		/*
		 * madfs: populated at once, as the plan above: each of
		 * their pages is written (or read) below, and one call
		 * costs less than a page fault per page.
		 */
		long a = syscall_no_intercept(SYS_mmap, NULL,
		    h->count * sizeof(desc->items[0]),
		    PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
		xabort_on_syserror(a, "plan items");
		desc->items = (void *)a;
	}
	const unsigned char *p = base + sizeof(*h);
	for (uint64_t i = 0; ok && i < h->count; ++i) {
		struct planned_patch pp; /* memcpy: p is not aligned */
		memcpy(&pp, p, sizeof(pp));
		p += sizeof(pp);
		ok = pp.syscall_off + 2 <= h->text_bytes &&
		    pp.dst_jmp_off + 2 <= h->text_bytes &&
		    pp.return_off <= h->text_bytes &&
		    pp.nop_size <= 15 &&
		    pp.nop_off + pp.nop_size <= h->text_bytes;
		struct patch_desc *patch = desc->items + i;
		patch->containing_lib_path = desc->path;
		patch->syscall_addr = desc->text_start + pp.syscall_off;
		patch->syscall_offset = pp.syscall_offset;
		patch->dst_jmp_patch = desc->text_start + pp.dst_jmp_off;
		patch->return_address = desc->text_start + pp.return_off;
		patch->uses_prev_ins_2 = pp.uses_prev_ins_2;
		patch->uses_prev_ins = pp.uses_prev_ins;
		patch->uses_next_ins = pp.uses_next_ins;
		patch->uses_nop_trampoline = pp.uses_nop;
		patch->known_nr = pp.known_nr >= 0 && pp.known_nr < 512 ?
		    pp.known_nr : -1;
		patch->nop_trampoline.address =
		    desc->text_start + pp.nop_off;
		patch->nop_trampoline.size = pp.nop_size;
		unpack_result(desc, &pp.prev2, &patch->preceding_ins_2);
		unpack_result(desc, &pp.prev, &patch->preceding_ins);
		unpack_result(desc, &pp.next, &patch->following_ins);
	}
	if (ok) {
		desc->count = (unsigned)h->count;
		desc->planned = true;
	} else if (desc->items != NULL) {
		syscall_no_intercept(SYS_munmap, desc->items,
		    h->count * sizeof(desc->items[0]));
		desc->items = NULL;
	}
	syscall_no_intercept(SYS_munmap, base, len);
	return ok ? 0 : -1;
}

void
plan_store(const struct intercept_desc *desc)
{
	struct plan_header h;
	char path[768], tmp[800];
	if (desc->planned || desc->count == 0 || plan_key(desc, &h) ||
	    plan_path(&h, path, sizeof(path)))
		return;
	h.text_addr = (uint64_t)(desc->text_start - desc->base_addr);
	h.text_offset = desc->text_offset;
	h.text_bytes = (uint64_t)(desc->text_end - desc->text_start + 1);
	h.count = desc->count;
	long fd = tmp_create(path, tmp, sizeof(tmp));
	if (fd < 0)
		return;
	int ok = write_all((int)fd, &h, sizeof(h)) == 0;
	for (unsigned i = 0; ok && i < desc->count; ++i) {
		const struct patch_desc *p = desc->items + i;
		struct planned_patch pp;
		memset(&pp, 0, sizeof(pp));
		const unsigned char *t = desc->text_start;
		pp.syscall_off = (uint64_t)(p->syscall_addr - t);
		pp.syscall_offset = p->syscall_offset;
		pp.dst_jmp_off = (uint64_t)(p->dst_jmp_patch - t);
		pp.return_off = (uint64_t)(p->return_address - t);
		pp.uses_prev_ins_2 = p->uses_prev_ins_2;
		pp.uses_prev_ins = p->uses_prev_ins;
		pp.uses_next_ins = p->uses_next_ins;
		pp.uses_nop = p->uses_nop_trampoline;
		pp.known_nr = p->known_nr;
		if (p->uses_nop_trampoline) {
			pp.nop_off = (uint64_t)(p->nop_trampoline.address - t);
			pp.nop_size = p->nop_trampoline.size;
		}
		pack_result(desc, &p->preceding_ins_2, &pp.prev2);
		pack_result(desc, &p->preceding_ins, &pp.prev);
		pack_result(desc, &p->following_ins, &pp.next);
		ok = write_all((int)fd, &pp, sizeof(pp)) == 0;
	}
	tmp_publish(fd, ok, tmp, path);
}

/*
 * report_unpatched -- says once on stderr that desc's library is left as it
 * is (madfs: the program runs on, without interception of that library)
 */
static void
report_unpatched(const struct intercept_desc *desc, const char *why)
{
	char msg[600];
	char *p = msg;
	const char *end = msg + sizeof(msg) - 1;
	put_str(&p, end, "madfs: syscall interception is off for ");
	put_str(&p, end, desc->path);
	put_str(&p, end, ": ");
	put_str(&p, end, why);
	*p++ = '\n';
	syscall_no_intercept(SYS_write, 2, msg, (size_t)(p - msg));
}

/*
 * find_syscalls
 * The routine that disassembles a text section. Here is some higher level
 * logic for finding syscalls, finding overwritable NOP instructions, and
 * finding out what instructions around syscalls can be overwritten or not.
 * This code is intentionally independent of the disassembling library used,
 * such specific code is in wrapper functions in the disasm_wrapper.c source
 * file.
 */
void
find_syscalls(struct intercept_desc *desc)
{
	debug_dump("find_syscalls in %s "
	    "at base_addr 0x%016" PRIxPTR "\n",
	    desc->path,
	    (uintptr_t)desc->base_addr);

	desc->count = 0;

	int fd = open_orig_file(desc);

	if (plan_load(desc, fd) == 0) {
		syscall_no_intercept(SYS_close, fd);
		return;
	}

	/*
	 * madfs: the tables' section headers are needed here only, not in
	 * the description, which then fits where every process has room for
	 * it (intercept.c, allocate_next_obj_desc)
	 */
	struct section_list symbol_tables, rela_tables;
	find_sections(desc, fd, &symbol_tables, &rela_tables);
	debug_dump(
	    "%s .text mapped at 0x%016" PRIxPTR " - 0x%016" PRIxPTR " \n",
	    desc->path,
	    (uintptr_t)desc->text_start,
	    (uintptr_t)desc->text_end);
	allocate_nop_table(desc);

	struct cache_header key;
	cache_key(desc, fd, &key);
	if (cache_load(desc, &key) == 0) {
		syscall_no_intercept(SYS_close, fd);
		return;
	}
	allocate_jump_table(desc);

	for (Elf64_Half i = 0; i < symbol_tables.count; ++i)
		find_jumps_in_section_syms(desc,
		    symbol_tables.headers + i, fd);

	for (Elf64_Half i = 0; i < rela_tables.count; ++i)
		find_jumps_in_section_rela(desc,
		    rela_tables.headers + i, fd);

	syscall_no_intercept(SYS_close, fd);

	if (!crawl_text(desc)) {
		report_unpatched(desc, intercept_disasm_unavailable());
		return;
	}
	cache_store(desc, &key);
	filter_patches(desc);
}
