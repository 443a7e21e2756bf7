/*
 * The per-record EVP work of sf_seal_batch (mode=records), measured in C (issue 30).
 *
 * Seals 100-byte records under one cached, keyed AES-256-GCM context with the sequence that
 * sf_seal_batch runs for each record (a new IV, the AAD, the plaintext, the final block, the
 * tag), and with each prefix of that sequence, so that the difference between rows is what
 * one step costs. Also: EVP_CIPHER_CTX_get_iv_length alone (OpenSSL 3.0 asks the provider
 * for it through an OSSL_PARAM on every EVP_CipherInit_ex2 with an IV; later releases keep
 * it in the context), and RAND_bytes of the nonces in blocks of 1024 (sf_seal_batch's
 * SF_NONCE_BLOCK). Prints ns per record, best of ROUNDS. Every OpenSSL return code is
 * checked; a failure aborts the run.
 *
 *   gcc -O2 -Wall -Wextra -Wconversion -o /tmp/record_sequence native/bench/record_sequence.c -lcrypto
 *   taskset -c 1 /tmp/record_sequence
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/rand.h>

#include "bench.h"

#define RECORD 100
#define AAD 19 /* a single-shot prefix of the key "default" (docs/API.md) */
#define TAG 16
#define NONCE 12
#define RECORDS 100000
#define ROUNDS 15
#define BLOCK 1024

enum { IV_ONLY, PLUS_AAD, PLUS_DATA, PLUS_FINAL, WHOLE, IV_LENGTH, NONCES, STEPS };

static const char *names[STEPS] = {
    "EVP_CipherInit_ex2 (the IV)",
    "+ EVP_EncryptUpdate (the AAD)",
    "+ EVP_EncryptUpdate (100 B)",
    "+ EVP_EncryptFinal_ex",
    "+ the tag (EVP_CIPHER_CTX_get_params): sf_seal_batch's sequence",
    "EVP_CIPHER_CTX_get_iv_length alone",
    "RAND_bytes, 12 B a record in blocks of 1024",
};

static void run(EVP_CIPHER_CTX *ctx, int step, const unsigned char *in, unsigned char *out,
                unsigned char *nonces)
{
    static const unsigned char aad[AAD] = {0};
    OSSL_PARAM params[2];
    int outl;
    for (size_t i = 0; i < RECORDS; i++) {
        unsigned char *iv = nonces + (i % BLOCK) * NONCE;
        if (step == NONCES) {
            if (i % BLOCK == 0)
                check(RAND_bytes(nonces, BLOCK * NONCE) == 1, "RAND_bytes");
            continue;
        }
        if (step == IV_LENGTH) {
            check(EVP_CIPHER_CTX_get_iv_length(ctx) == NONCE, "EVP_CIPHER_CTX_get_iv_length");
            continue;
        }
        check(EVP_CipherInit_ex2(ctx, NULL, NULL, iv, 1, NULL), "EVP_CipherInit_ex2");
        if (step >= PLUS_AAD)
            check(EVP_EncryptUpdate(ctx, NULL, &outl, aad, AAD), "EVP_EncryptUpdate (AAD)");
        if (step >= PLUS_DATA)
            check(EVP_EncryptUpdate(ctx, out, &outl, in, RECORD) && outl == RECORD,
                  "EVP_EncryptUpdate");
        if (step >= PLUS_FINAL)
            check(EVP_EncryptFinal_ex(ctx, out + RECORD, &outl) && outl == 0,
                  "EVP_EncryptFinal_ex");
        if (step >= WHOLE) {
            params[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG,
                                                          out + RECORD, TAG);
            params[1] = OSSL_PARAM_construct_end();
            check(EVP_CIPHER_CTX_get_params(ctx, params), "EVP_CIPHER_CTX_get_params");
        }
    }
}

int main(void)
{
    unsigned char key[32], in[RECORD], out[RECORD + TAG];
    static unsigned char nonces[BLOCK * NONCE];
    double best[STEPS];
    EVP_CIPHER *cipher = EVP_CIPHER_fetch(NULL, "AES-256-GCM", NULL);
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();

    check(cipher != NULL && ctx != NULL, "EVP_CIPHER_fetch");
    check(RAND_bytes(key, sizeof key) == 1 && RAND_bytes(in, sizeof in) == 1, "RAND_bytes");
    check(RAND_bytes(nonces, sizeof nonces) == 1, "RAND_bytes");
    check(EVP_CipherInit_ex2(ctx, cipher, key, nonces, 1, NULL), "EVP_CipherInit_ex2");
    for (int s = 0; s < STEPS; s++)
        best[s] = 1e9;
    for (int r = 0; r < ROUNDS; r++) {
        for (int s = 0; s < STEPS; s++) { /* interleaved: a busy minute hits every row */
            double start = now();
            run(ctx, s, in, out, nonces);
            double took = (now() - start) / RECORDS * 1e9;
            if (took < best[s])
                best[s] = took;
        }
    }
    printf("%s, AES-256-GCM, %d-byte records, %d-byte AAD, best of %d:\n",
           OpenSSL_version(OPENSSL_VERSION), RECORD, AAD, ROUNDS);
    for (int s = 0; s < STEPS; s++)
        printf("  %-66s %7.1f ns a record\n", names[s], best[s]);
    EVP_CIPHER_CTX_free(ctx);
    EVP_CIPHER_free(cipher);
    return 0;
}
