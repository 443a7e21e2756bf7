/*
 * What the C benchmarks of this folder share: an OpenSSL return code checked (a failure prints
 * OpenSSL's errors and aborts the run) and a monotonic clock in seconds.
 */
#ifndef SEALFLOW_BENCH_H
#define SEALFLOW_BENCH_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <openssl/err.h>

static void check(int ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "%s failed\n", what);
        ERR_print_errors_fp(stderr);
        exit(1);
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
