/*
 * The functions and constants sealflow_native.c exports to Python.
 *
 * This file is also the cffi cdef (native/ffi/build.py reads it, minus the
 * preprocessor guard), so every constant here is visible to Python as
 * lib.NAME and is never written down twice. Keep it to what cffi's cdef
 * parser accepts: plain prototypes and integer #defines.
 */
#ifndef SEALFLOW_NATIVE_H
#define SEALFLOW_NATIVE_H

#define SF_MIN_OPENSSL_VERSION 0x300000D0

#define SF_NONCE_LEN 12
#define SF_TAG_LEN 16
#define SF_CHUNK 16384
#define SF_SCRATCH_LEN 8192
/* Output buffers from this size on are asked to use transparent huge pages (sf_advise_huge). */
#define SF_HUGE_OUTPUT 4194304
/* Longest HKDF-Expand output sf_hkdf_expand_sha512 makes (two SHA-512 blocks). */
#define SF_HKDF_MAX 128

/* Algorithms, by index: AES-128-GCM, AES-256-GCM, ChaCha20-Poly1305. */
#define SF_ALGORITHMS 3

/* Return codes. */
#define SF_OK 0
#define SF_ERR_OPENSSL -1
#define SF_ERR_AUTH -2
#define SF_ERR_ARG -3
#define SF_ERR_LIMIT -4

/* HMAC digests, by index: SHA2-224, -256, -384, -512, SHA3-224, -256, -384, -512. */
#define SF_DIGESTS 8
/* Longest digest (SHA-512, SHA3-512) and widest block (SHA3-224's rate) among them. */
#define SF_MAX_MD 64
#define SF_MAX_BLOCK 144

/* Context strategies (Amazon Corretto Crypto Provider's names). */
#define SF_LAZY 0
#define SF_HYBRID 1
#define SF_EAGER 2
#define SF_STRATEGIES 3

/* Context events, counted per strategy. */
#define SF_EV_CREATED 0
#define SF_EV_REKEYED 1
#define SF_EV_REUSED 2
#define SF_EV_FREED 3
#define SF_EVENTS 4

/* Batches of records (sf_seal_many, sf_open_many): u32 big-endian length framing, and the
   status of each opened record. */
#define SF_FRAME_LEN 4
#define SF_REC_OK 0
#define SF_REC_FAILED 1
#define SF_REC_OTHER_PREFIX 2

int sf_init(void);
unsigned long sf_openssl_version_num(void);
void sf_stats_read(uint64_t *out);
void sf_set_strategy(int strategy);
uintptr_t sf_thread_context_id(int alg);
void sf_thread_release(void);

int sf_seal(int alg, const char *key, const char *nonce, const char *aad, size_t aadlen,
            const char *in, size_t inlen, char *out);
int sf_open(int alg, const char *key, const char *nonce, const char *aad, size_t aadlen,
            const char *in, size_t ctlen, char *out);
const char *sf_seal_small(int alg, const char *key, const char *nonce, const char *aad,
                          size_t aadlen, const char *in, size_t inlen);
const char *sf_open_small(int alg, const char *key, const char *nonce, const char *aad,
                          size_t aadlen, const char *in, size_t ctlen);
int sf_scratch_error(void);
int sf_chunks_seal(int alg, const char *key, const char *base_nonce, uint64_t counter,
                   const char *in, size_t inlen, int final, char *out);
int sf_chunks_open(int alg, const char *key, const char *base_nonce, uint64_t counter,
                   const char *in, size_t inlen, int final, char *out);
int sf_frames_scan(const char *in, size_t inlen, uint32_t max_len, uint32_t *lens, size_t room,
                   size_t *count, size_t *used);
int sf_records_size(const uint32_t *lens, size_t count, size_t frame, size_t fixed, int open,
                    uint64_t *total);
int sf_seal_many(int alg, const char *key, const char *aad, size_t aadlen, size_t prefixlen,
                 const char *in, size_t inlen, const uint32_t *lens, size_t count, int in_framed,
                 int out_framed, char *out, size_t outlen, uint64_t *offsets);
int sf_open_many(int alg, const char *key, const char *aad, size_t aadlen, size_t prefixlen,
                 const char *in, size_t inlen, const uint32_t *lens, size_t count, int in_framed,
                 char *out, size_t outlen, uint64_t *offsets, unsigned char *status);
int sf_hkdf_expand_sha512(const char *key, size_t keylen, const char *info, size_t infolen,
                          char *out, size_t outlen);
/* Batches as text (sf_base64_column, sf_seal_many_text): standard padded base64. */
int sf_base64_column(const char *in, size_t inlen, const char *sep, size_t seplen,
                     size_t max_count, int exact, char *out, size_t outlen, uint32_t *lens,
                     size_t *count, size_t *used);
int sf_text_size(const uint32_t *lens, size_t count, size_t fixed, size_t beforelen,
                 size_t afterlen, const uint32_t *after_lens, size_t seplen, size_t headlen,
                 size_t taillen, uint64_t *total);
int sf_seal_many_text(int alg, const char *key, const char *aad, size_t aadlen, const char *in,
                      size_t inlen, const uint32_t *lens, size_t count, const char *before,
                      size_t beforelen, const char *after, size_t afterlen,
                      const uint32_t *after_lens, const char *sep, size_t seplen,
                      const char *head, size_t headlen, const char *tail, size_t taillen,
                      char *out, size_t outlen);
/* HMAC of every record, each written as [u32 big-endian length] || tag (sf_hmac_many). */
int sf_digest_size(int digest);
int sf_hmac_many(int digest, const char *key, size_t keylen, const char *in, size_t inlen,
                 const uint32_t *lens, size_t count, int in_framed, int out_framed, char *out,
                 size_t outlen);
/* The HMAC of one message of under 4 GiB, in the thread's scratch buffer (NULL on failure,
 * reason in sf_scratch_error); its size is sf_digest_size(digest). */
const char *sf_hmac_small(int digest, const char *key, size_t keylen, const char *in,
                          size_t inlen);
void sf_cleanse(char *buf, size_t len);
void sf_advise_huge(char *buf, size_t len);

#endif
