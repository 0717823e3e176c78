/*
 * syscallprobe tries system calls a sandboxed command must not make, and a
 * few it must be able to make, through the 64-bit entry (syscall) and the
 * i386 entry (int $0x80). Each attempt runs in a child process so that a
 * filter killing the process ends only that attempt. One line per attempt:
 *
 *   <entry> <name> ok <return value>
 *   <entry> <name> err <errno>
 *   <entry> <name> signal <signal number>
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* i386 call numbers (arch/x86/entry/syscalls/syscall_32.tbl). */
#define I386_WRITE 4
#define I386_GETPID 20
#define I386_IOCTL 54
#define I386_PTRACE 26
#define I386_PERSONALITY 136
#define I386_UNSHARE 310
#define I386_KEYCTL 288
#define I386_PERF_EVENT_OPEN 336
#define I386_KCMP 349
#define I386_IO_URING_SETUP 425
#define I386_CLONE3 435

#define ADDR_NO_RANDOMIZE_ 0x0040000
#define KEYCTL_JOIN_SESSION_KEYRING_ 1

/* i386 returns the raw kernel result: -4095..-1 is an error. */
static long i386_call(long nr, long a, long b, long c, long d, long e) {
	long ret;
	__asm__ volatile("push %%rbp\n\t"
	                 "int $0x80\n\t"
	                 "pop %%rbp"
	                 : "=a"(ret)
	                 : "a"(nr), "b"(a), "c"(b), "d"(c), "S"(d), "D"(e)
	                 : "memory", "r8", "r9", "r10", "r11");
	if (ret < 0 && ret > -4096) {
		errno = -ret;
		return -1;
	}
	return ret;
}

struct call {
	const char *name;
	long nr64, nr32;
	long args[5];
};

/* Arguments that would succeed were the call allowed: the probe must see
 * the filter's answer, not an argument error. */
static struct call calls[] = {
	{"getpid", SYS_getpid, I386_GETPID, {0}},
	{"write", SYS_write, I386_WRITE, {1, 0 /* set below */, 0}},
	{"unshare_user", SYS_unshare, I386_UNSHARE, {CLONE_NEWUSER}},
	{"unshare_mount", SYS_unshare, I386_UNSHARE, {CLONE_NEWNS}},
	{"keyctl", SYS_keyctl, I386_KEYCTL, {KEYCTL_JOIN_SESSION_KEYRING_, 0}},
	{"ptrace", SYS_ptrace, I386_PTRACE, {0 /* PTRACE_TRACEME */}},
	{"perf_event_open", SYS_perf_event_open, I386_PERF_EVENT_OPEN, {0 /* set below */, 0, -1, -1, 0}},
	{"personality", SYS_personality, I386_PERSONALITY, {ADDR_NO_RANDOMIZE_}},
	{"kcmp", SYS_kcmp, I386_KCMP, {0 /* own pid */, 0 /* own pid */, 0 /* KCMP_FILE */, 0, 0}},
	{"io_uring_setup", SYS_io_uring_setup, I386_IO_URING_SETUP, {1, 0 /* set below */}},
	{"tiocsti", SYS_ioctl, I386_IOCTL, {0, TIOCSTI, 0 /* set below */}},
	{"clone3", SYS_clone3, I386_CLONE3, {0 /* set below */, 64}},
};

static void attempt(const char *entry, struct call *c) {
	fflush(stdout);
	pid_t pid = fork();
	if (pid < 0) {
		perror("fork");
		exit(2);
	}
	if (pid == 0) {
		long *a = c->args;
		long ret;
		if (strcmp(entry, "i386") == 0)
			ret = i386_call(c->nr32, a[0], a[1], a[2], a[3], a[4]);
		else
			ret = syscall(c->nr64, a[0], a[1], a[2], a[3], a[4]);
		if (ret == 0 && strcmp(c->name, "clone3") == 0)
			_exit(0); /* the new process, should clone3 ever succeed */
		if (ret == -1)
			printf("%s %s err %d\n", entry, c->name, errno);
		else
			printf("%s %s ok %ld\n", entry, c->name, ret);
		fflush(stdout);
		_exit(0);
	}
	int status;
	if (waitpid(pid, &status, 0) < 0) {
		perror("waitpid");
		exit(2);
	}
	if (WIFSIGNALED(status))
		printf("%s %s signal %d\n", entry, c->name, WTERMSIG(status));
}

int main(void) {
	/* The i386 entry reads 32-bit pointers: buffers must sit below 4 GiB,
	 * which static storage of a non-PIE build does. */
	static char nl[] = "";
	static unsigned char perf_attr[128];
	static unsigned char uring_params[120];
	static char inject[] = "x";
	static unsigned long long clone_args[8];
	long pid = getpid();

	perf_attr[0] = 1;                            /* PERF_TYPE_SOFTWARE */
	*(unsigned int *)(perf_attr + 4) = 128;      /* size */
	clone_args[4] = SIGCHLD;                     /* exit_signal */
	for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
		struct call *c = &calls[i];
		if (strcmp(c->name, "write") == 0) c->args[1] = (long)nl, c->args[2] = 0;
		if (strcmp(c->name, "perf_event_open") == 0) c->args[0] = (long)perf_attr;
		if (strcmp(c->name, "kcmp") == 0) c->args[0] = pid, c->args[1] = pid;
		if (strcmp(c->name, "io_uring_setup") == 0) c->args[1] = (long)uring_params;
		if (strcmp(c->name, "tiocsti") == 0) c->args[2] = (long)inject;
		if (strcmp(c->name, "clone3") == 0) c->args[0] = (long)clone_args;
	}
	for (size_t i = 0; i < sizeof calls / sizeof calls[0]; i++) {
		attempt("x86_64", &calls[i]);
		attempt("i386", &calls[i]);
	}
	return 0;
}
