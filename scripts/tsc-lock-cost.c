// What a time-stamp counter read costs on this machine, with and without a
// lock's atomic instructions around it (docs/performance-history.md, recorder section,
// fifth session). The recorder reads the counter once per allocator call; on
// the KVM hosts we measured, the read costs 1 to 30 ns on its own but 20 to 60 ns
// once a locked instruction follows it closely, which is why the recorder's
// lock avoids them for the thread that uses it most.
//
//   cc -O2 -o /tmp/tsc-lock-cost scripts/tsc-lock-cost.c
//   taskset -c 2 /tmp/tsc-lock-cost
//
// Each "call" is a short stretch of dependent integer work (a stand-in for
// an allocator call) behind: no lock; a compare-exchange to take it and an
// exchange to release it (an uncontended futex mutex); a compare-exchange and
// a plain store. Best of 15 rounds, each 1M calls; x86-64 only.
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <x86intrin.h>

#define CALLS 1000000

static uint64_t table[4096];
static uint64_t events[1 << 16];
static int lock_word;

static double now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e9 + t.tv_nsec;
}

__attribute__((noinline)) static uint64_t work(uint64_t x) {
    for (int i = 0; i < 12; i++) {
        x = x * 6364136223846793005ULL + table[(x >> 20) & 4095];
        table[(x >> 30) & 4095] += x;
    }
    return x;
}

// lock: 0 none, 1 compare-exchange + exchange, 2 compare-exchange + store.
static double ns_per_call(int lock, int read_tsc) {
    uint64_t x = 1;
    size_t k = 0;
    double start = now_ns();
    for (int i = 0; i < CALLS; i++) {
        if (lock) {
            int expected = 0;
            while (!__atomic_compare_exchange_n(&lock_word, &expected, 1, 0, __ATOMIC_ACQUIRE,
                                                __ATOMIC_RELAXED))
                expected = 0;
        }
        uint64_t t = read_tsc ? __rdtsc() : 0;
        x = work(x);
        // The "event": its time and a result, as the recorder writes one.
        events[k & 65535] = t;
        events[(k + 1) & 65535] = x;
        k += 8;
        if (lock == 1) __atomic_exchange_n(&lock_word, 0, __ATOMIC_RELEASE);
        if (lock == 2) __atomic_store_n(&lock_word, 0, __ATOMIC_RELEASE);
    }
    double ns = (now_ns() - start) / CALLS;
    events[0] += x;
    return ns;
}

int main(void) {
    for (int i = 0; i < 4096; i++) table[i] = i * 7;
    double best[3][2];
    for (int l = 0; l < 3; l++) best[l][0] = best[l][1] = 1e30;
    for (int round = 0; round < 15; round++)
        for (int l = 0; l < 3; l++)
            for (int c = 0; c < 2; c++) {
                double v = ns_per_call(l, c);
                if (v < best[l][c]) best[l][c] = v;
            }
    const char *names[3] = {"no lock", "cmpxchg + xchg", "cmpxchg + store"};
    printf("%-16s %12s %14s\n", "lock", "ns per call", "+ counter read");
    for (int l = 0; l < 3; l++)
        printf("%-16s %12.1f %+14.1f\n", names[l], best[l][0], best[l][1] - best[l][0]);
    return 0;
}
