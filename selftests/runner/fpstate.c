// SPDX-License-Identifier: GPL-2.0
/*
 * fpstate: a task's vector registers survive every context switch and
 * every signal its guest kernel delivers.
 *
 * User Mode Linux keeps each task's FP/XSTATE registers in its own memory
 * and moves them into and out of the host process with ptrace. If it
 * copies only part of the host's XSTATE (the host has AVX-512 or AMX and
 * UML sized its copy at build time), or loses the state on a signal, a
 * task sees another task's or its signal handler's registers. This test
 * makes that visible wherever it runs: two processes of two threads each
 * load their own pattern into every vector register the CPU has (ymm0-15
 * with AVX2; zmm0-31 and k0-7 with AVX-512), enter the kernel thousands of
 * times with the registers live (sched_yield, so the others run; tgkill of
 * itself, so a handler that overwrites every vector register runs), and
 * compare the registers with the pattern afterwards.
 *
 * x86_64 only; SKIP where the CPU or the kernel does not offer AVX2.
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <linux/types.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kselftest.h"

#define PROCS		2
#define THREADS		2
#define YIELDS		4	/* kernel entries per asm block */

/* One block of register contents: zmm0-31 (or ymm0-15), then k0-7. */
struct vregs {
	__u8 z[32][64];
	__u64 k[8];
};

/* What the asm block needs; syscall numbers are put in rax by the asm. */
struct call {
	const struct vregs *in;
	struct vregs *out;
	long rounds;
	long tgid;
	long tid;
	long sig;		/* 0: only yield; else also tgkill(self, sig) */
};

enum kind { AVX2, AVX512, KINDS };
enum mode { YIELD, SIGNAL, MODES };

static const char *const kind_name[KINDS] = { "avx2 ymm0-15", "avx512 zmm0-31 k0-7" };
static const char *const mode_name[MODES] = { "yields", "signals" };

/* Results of one worker for one kind and mode, shared with the parent. */
struct result {
	long blocks;
	long bad_blocks;
	long signals;
	char first[160];
};

static struct result (*results)[THREADS][KINDS][MODES];
static __thread long handled;
static long iterations = 2000;

/* Asm text for register n. */
#define Y_LOAD(n)   "vmovdqu " #n "*64(%%r13), %%ymm" #n "\n\t"
#define Y_STORE(n)  "vmovdqu %%ymm" #n ", " #n "*64(%%r13)\n\t"
#define Y_COPY0(n)  "vmovdqa %%ymm0, %%ymm" #n "\n\t"
#define Z_LOAD(n)   "vmovdqu64 " #n "*64(%%r13), %%zmm" #n "\n\t"
#define Z_STORE(n)  "vmovdqu64 %%zmm" #n ", " #n "*64(%%r13)\n\t"
#define Z_COPY0(n)  "vmovdqa64 %%zmm0, %%zmm" #n "\n\t"
#define K_LOAD(n)   "kmovq 2048+" #n "*8(%%r13), %%k" #n "\n\t"
#define K_STORE(n)  "kmovq %%k" #n ", 2048+" #n "*8(%%r13)\n\t"
#define K_ONES(n)   "kxnorq %%k" #n ", %%k" #n ", %%k" #n "\n\t"

/*
 * The signal handler overwrites every vector register the test uses, as
 * a handler calling an AVX-512 memcpy would; the kernel's sigreturn must
 * give the interrupted code its own registers back.
 */
__attribute__((target("avx512f,avx512bw")))
static void clobber_avx512(void)
{
	asm volatile("vpternlogd $0xff, %%zmm0, %%zmm0, %%zmm0\n\t"
		     Z_COPY0(1) Z_COPY0(2) Z_COPY0(3) Z_COPY0(4)
		     Z_COPY0(5) Z_COPY0(6) Z_COPY0(7) Z_COPY0(8)
		     Z_COPY0(9) Z_COPY0(10) Z_COPY0(11) Z_COPY0(12)
		     Z_COPY0(13) Z_COPY0(14) Z_COPY0(15) Z_COPY0(16)
		     Z_COPY0(17) Z_COPY0(18) Z_COPY0(19) Z_COPY0(20)
		     Z_COPY0(21) Z_COPY0(22) Z_COPY0(23) Z_COPY0(24)
		     Z_COPY0(25) Z_COPY0(26) Z_COPY0(27) Z_COPY0(28)
		     Z_COPY0(29) Z_COPY0(30) Z_COPY0(31)
		     K_ONES(0) K_ONES(1) K_ONES(2) K_ONES(3)
		     K_ONES(4) K_ONES(5) K_ONES(6) K_ONES(7)
		     ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",
		     "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",
		     "xmm14", "xmm15", "xmm16", "xmm17", "xmm18", "xmm19",
		     "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25",
		     "xmm26", "xmm27", "xmm28", "xmm29", "xmm30", "xmm31",
		     "k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7");
}

__attribute__((target("avx2")))
static void clobber_avx2(void)
{
	asm volatile("vpcmpeqd %%ymm0, %%ymm0, %%ymm0\n\t"
		     Y_COPY0(1) Y_COPY0(2) Y_COPY0(3) Y_COPY0(4)
		     Y_COPY0(5) Y_COPY0(6) Y_COPY0(7) Y_COPY0(8)
		     Y_COPY0(9) Y_COPY0(10) Y_COPY0(11) Y_COPY0(12)
		     Y_COPY0(13) Y_COPY0(14) Y_COPY0(15)
		     ::: "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",
		     "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13",
		     "xmm14", "xmm15");
}

static int have_avx512;

static void handler(int sig)
{
	(void)sig;
	handled++;
	if (have_avx512)
		clobber_avx512();
	else
		clobber_avx2();
}

/*
 * The kernel entries happen inside the asm, between loading and storing
 * the registers, so no compiler-generated code runs while they are live.
 * syscall clobbers rax, rcx and r11; tgkill's arguments use rdi, rsi, rdx.
 */
#define ENTRIES							\
	"mov 16(%[c]), %%r12\n\t"				\
	"1: mov $" __stringify(SYS_sched_yield) ", %%eax\n\t"	\
	"syscall\n\t"						\
	"cmpq $0, 40(%[c])\n\t"					\
	"je 2f\n\t"						\
	"mov 24(%[c]), %%rdi\n\t"				\
	"mov 32(%[c]), %%rsi\n\t"				\
	"mov 40(%[c]), %%rdx\n\t"				\
	"mov $" __stringify(SYS_tgkill) ", %%eax\n\t"		\
	"syscall\n\t"						\
	"2: dec %%r12\n\t"					\
	"jnz 1b\n\t"

#define __stringify_1(x) #x
#define __stringify(x) __stringify_1(x)

__attribute__((target("avx2")))
static void run_avx2(struct call *c)
{
	asm volatile("mov (%[c]), %%r13\n\t"
		     Y_LOAD(0) Y_LOAD(1) Y_LOAD(2) Y_LOAD(3)
		     Y_LOAD(4) Y_LOAD(5) Y_LOAD(6) Y_LOAD(7)
		     Y_LOAD(8) Y_LOAD(9) Y_LOAD(10) Y_LOAD(11)
		     Y_LOAD(12) Y_LOAD(13) Y_LOAD(14) Y_LOAD(15)
		     ENTRIES
		     "mov 8(%[c]), %%r13\n\t"
		     Y_STORE(0) Y_STORE(1) Y_STORE(2) Y_STORE(3)
		     Y_STORE(4) Y_STORE(5) Y_STORE(6) Y_STORE(7)
		     Y_STORE(8) Y_STORE(9) Y_STORE(10) Y_STORE(11)
		     Y_STORE(12) Y_STORE(13) Y_STORE(14) Y_STORE(15)
		     "vzeroupper\n\t"
		     : : [c] "r" (c)
		     : "rax", "rcx", "rdx", "rsi", "rdi", "r11", "r12", "r13",
		       "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",
		       "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
		       "xmm13", "xmm14", "xmm15", "memory", "cc");
}

__attribute__((target("avx512f,avx512bw")))
static void run_avx512(struct call *c)
{
	asm volatile("mov (%[c]), %%r13\n\t"
		     Z_LOAD(0) Z_LOAD(1) Z_LOAD(2) Z_LOAD(3)
		     Z_LOAD(4) Z_LOAD(5) Z_LOAD(6) Z_LOAD(7)
		     Z_LOAD(8) Z_LOAD(9) Z_LOAD(10) Z_LOAD(11)
		     Z_LOAD(12) Z_LOAD(13) Z_LOAD(14) Z_LOAD(15)
		     Z_LOAD(16) Z_LOAD(17) Z_LOAD(18) Z_LOAD(19)
		     Z_LOAD(20) Z_LOAD(21) Z_LOAD(22) Z_LOAD(23)
		     Z_LOAD(24) Z_LOAD(25) Z_LOAD(26) Z_LOAD(27)
		     Z_LOAD(28) Z_LOAD(29) Z_LOAD(30) Z_LOAD(31)
		     K_LOAD(0) K_LOAD(1) K_LOAD(2) K_LOAD(3)
		     K_LOAD(4) K_LOAD(5) K_LOAD(6) K_LOAD(7)
		     ENTRIES
		     "mov 8(%[c]), %%r13\n\t"
		     Z_STORE(0) Z_STORE(1) Z_STORE(2) Z_STORE(3)
		     Z_STORE(4) Z_STORE(5) Z_STORE(6) Z_STORE(7)
		     Z_STORE(8) Z_STORE(9) Z_STORE(10) Z_STORE(11)
		     Z_STORE(12) Z_STORE(13) Z_STORE(14) Z_STORE(15)
		     Z_STORE(16) Z_STORE(17) Z_STORE(18) Z_STORE(19)
		     Z_STORE(20) Z_STORE(21) Z_STORE(22) Z_STORE(23)
		     Z_STORE(24) Z_STORE(25) Z_STORE(26) Z_STORE(27)
		     Z_STORE(28) Z_STORE(29) Z_STORE(30) Z_STORE(31)
		     K_STORE(0) K_STORE(1) K_STORE(2) K_STORE(3)
		     K_STORE(4) K_STORE(5) K_STORE(6) K_STORE(7)
		     "vzeroupper\n\t"
		     : : [c] "r" (c)
		     : "rax", "rcx", "rdx", "rsi", "rdi", "r11", "r12", "r13",
		       "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6",
		       "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
		       "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18",
		       "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24",
		       "xmm25", "xmm26", "xmm27", "xmm28", "xmm29", "xmm30",
		       "xmm31", "k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7",
		       "memory", "cc");
}

/* A pattern no other worker, block or the handler's all-ones produces. */
static void fill(struct vregs *v, unsigned int worker, long block)
{
	__u64 x = 0x9e3779b97f4a7c15ull * (worker + 1) + (__u64)block;
	size_t i;

	for (i = 0; i < sizeof(v->z); i += 8) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		memcpy(&v->z[0][0] + i, &x, 8);
	}
	for (i = 0; i < 8; i++)
		v->k[i] = x + i;
}

/* Compare what the asm stored with what it loaded; describe a mismatch. */
static int compare(enum kind kind, const struct vregs *want,
		   const struct vregs *got, char *why, size_t len)
{
	int nz = kind == AVX512 ? 32 : 16, width = kind == AVX512 ? 64 : 32;
	int r, b;

	for (r = 0; r < nz; r++) {
		for (b = 0; b < width; b++) {
			if (want->z[r][b] == got->z[r][b])
				continue;
			snprintf(why, len, "%cmm%d byte %d: want %02x, got %02x",
				 kind == AVX512 ? 'z' : 'y', r, b,
				 want->z[r][b], got->z[r][b]);
			return 1;
		}
	}
	if (kind != AVX512)
		return 0;
	for (r = 0; r < 8; r++) {
		if (want->k[r] == got->k[r])
			continue;
		snprintf(why, len, "k%d: want %016llx, got %016llx", r,
			 (unsigned long long)want->k[r],
			 (unsigned long long)got->k[r]);
		return 1;
	}
	return 0;
}

struct worker {
	int proc, thread;
};

static void *work(void *arg)
{
	const struct worker *w = arg;
	unsigned int id = w->proc * THREADS + w->thread;
	static __thread struct vregs in, out;
	char why[120];
	enum kind kind;
	enum mode mode;
	long i;

	for (kind = AVX2; kind < KINDS; kind++) {
		if (kind == AVX512 && !have_avx512)
			continue;
		for (mode = YIELD; mode < MODES; mode++) {
			struct result *res = &results[w->proc][w->thread][kind][mode];
			struct call c = {
				.in = &in, .out = &out, .rounds = YIELDS,
				.tgid = getpid(), .tid = gettid(),
				.sig = mode == SIGNAL ? SIGUSR1 : 0,
			};
			long before = handled;

			for (i = 0; i < iterations; i++) {
				fill(&in, id, i);
				memset(&out, 0, sizeof(out));
				if (kind == AVX512)
					run_avx512(&c);
				else
					run_avx2(&c);
				res->blocks++;
				if (compare(kind, &in, &out, why, sizeof(why))) {
					if (!res->bad_blocks++)
						snprintf(res->first, sizeof(res->first),
							 "worker %u block %ld: %s", id, i, why);
				}
			}
			res->signals = handled - before;
		}
	}
	return NULL;
}

static int run_process(int proc)
{
	pthread_t tid[THREADS];
	struct worker w[THREADS];
	int t;

	for (t = 0; t < THREADS; t++) {
		w[t] = (struct worker){ .proc = proc, .thread = t };
		if (pthread_create(&tid[t], NULL, work, &w[t]))
			return 1;
	}
	for (t = 0; t < THREADS; t++)
		pthread_join(tid[t], NULL);
	return 0;
}

/* AVX2 needs the CPU's bit and the kernel's XCR0 bits for SSE and AVX. */
static int cpu_has(enum kind kind)
{
	unsigned int a, b, c, d;
	__u32 xcr0_lo, xcr0_hi;
	__u64 xcr0, need;

	if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_OSXSAVE) || !(c & bit_AVX))
		return 0;
	asm volatile("xgetbv" : "=a" (xcr0_lo), "=d" (xcr0_hi) : "c" (0));
	xcr0 = (__u64)xcr0_hi << 32 | xcr0_lo;
	if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
		return 0;
	if (kind == AVX2) {
		need = 0x6;	/* SSE, AVX */
		return (b & bit_AVX2) && (xcr0 & need) == need;
	}
	need = 0xe6;		/* SSE, AVX, opmask, ZMM_Hi256, Hi16_ZMM */
	return (b & bit_AVX512F) && (b & bit_AVX512BW) && (xcr0 & need) == need;
}

static int cpuinfo_flag(const char *flag)
{
	char line[8192], word[64];
	FILE *f = fopen("/proc/cpuinfo", "r");
	int found = 0;

	if (!f)
		return -1;
	snprintf(word, sizeof(word), " %s", flag);
	while (!found && fgets(line, sizeof(line), f)) {
		char *p;

		if (strncmp(line, "flags", 5))
			continue;
		for (p = strstr(line, word); p; p = strstr(p + 1, word))
			if (p[strlen(word)] == ' ' || p[strlen(word)] == '\n')
				found = 1;
	}
	fclose(f);
	return found;
}

int main(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = handler };
	pid_t pid[PROCS];
	int p, t, status, failed_procs = 0;
	enum kind kind;
	enum mode mode;

	if (argc > 1)
		iterations = strtol(argv[1], NULL, 0);
	if (iterations <= 0)
		ksft_exit_fail_msg("usage: %s [ITERATIONS]\n", argv[0]);

	ksft_print_header();
	ksft_set_plan(KINDS * MODES);
	if (!cpu_has(AVX2))
		ksft_exit_skip("no AVX2 (CPUID and XCR0): nothing to check here\n");
	have_avx512 = cpu_has(AVX512);
	ksft_print_msg("CPUID/XCR0: avx2 yes, avx512 %s; /proc/cpuinfo: avx512f %s\n",
		       have_avx512 ? "yes" : "no",
		       cpuinfo_flag("avx512f") == 1 ? "yes" : "no");
	ksft_print_msg("%d processes x %d threads, %ld blocks each of %d kernel entries\n",
		       PROCS, THREADS, iterations, YIELDS);

	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGUSR1, &sa, NULL))
		ksft_exit_fail_msg("sigaction: %s\n", strerror(errno));
	results = mmap(NULL, sizeof(*results) * PROCS, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (results == MAP_FAILED)
		ksft_exit_fail_msg("mmap: %s\n", strerror(errno));

	for (p = 0; p < PROCS; p++) {
		pid[p] = fork();
		if (pid[p] < 0)
			ksft_exit_fail_msg("fork: %s\n", strerror(errno));
		if (pid[p] == 0)
			_exit(run_process(p));
	}
	for (p = 0; p < PROCS; p++) {
		if (waitpid(pid[p], &status, 0) < 0 || !WIFEXITED(status) ||
		    WEXITSTATUS(status)) {
			ksft_print_msg("process %d ended with status 0x%x\n", p, status);
			failed_procs++;
		}
	}

	for (kind = AVX2; kind < KINDS; kind++) {
		for (mode = YIELD; mode < MODES; mode++) {
			long blocks = 0, bad = 0, sigs = 0;
			const char *first = NULL;

			if (kind == AVX512 && !have_avx512) {
				ksft_test_result_skip("%s across %s: the CPU has no AVX-512\n",
						      kind_name[kind], mode_name[mode]);
				continue;
			}
			for (p = 0; p < PROCS; p++) {
				for (t = 0; t < THREADS; t++) {
					struct result *r = &results[p][t][kind][mode];

					blocks += r->blocks;
					bad += r->bad_blocks;
					sigs += r->signals;
					if (!first && r->first[0])
						first = r->first;
				}
			}
			if (first)
				ksft_print_msg("first difference: %s\n", first);
			ksft_print_msg("%s across %s: %ld blocks, %ld wrong, %ld signals handled\n",
				       kind_name[kind], mode_name[mode], blocks, bad, sigs);
			ksft_test_result(!failed_procs && !bad &&
					 blocks == (long)PROCS * THREADS * iterations &&
					 (mode == YIELD || sigs == blocks * YIELDS),
					 "%s survive %s\n", kind_name[kind], mode_name[mode]);
		}
	}
	ksft_finished();
}
