/*
 * sealflow native AEAD helpers over OpenSSL's EVP API.
 *
 * Each function is one crossing from Python: a whole message, or a run of
 * consecutive C2SP chunks, per call. Lengths are validated once at entry,
 * never inside the chunk loop. Every OpenSSL return code is checked; on an
 * OpenSSL failure the error stays on the thread's error queue for the Python
 * side to drain into one exception.
 */
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/core_names.h>
#include <openssl/opensslv.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <openssl/sha.h>

#include "sealflow_native.h"

#if OPENSSL_VERSION_NUMBER < SF_MIN_OPENSSL_VERSION
#error "sealflow needs OpenSSL libcrypto >= 3.0.13 (install libssl-dev from Debian 12 or newer)"
#endif

#define SF_CHUNK_CT (SF_CHUNK + SF_TAG_LEN)
#define SF_MAX_CHUNKS (1ULL << 38)
/* EVP_*Update take an int length: feed long messages in slices below it. */
#define SF_SLICE (1 << 30)
/*
 * ChaCha20-Poly1305 in OpenSSL runs the cipher over an update, then Poly1305 over it. In a
 * run of chunks too long to be in cache, each chunk's update is fed in 4 KiB slices: the
 * two passes alternate four times per 16 KiB chunk and the input keeps streaming in from
 * memory (64 MiB chunked seal 0.88x -> 0.91x of one call in C). A run that is in cache
 * loses about 1 % to the extra calls, so shorter runs are fed whole. GCM is one stitched
 * pass either way. Measured by native/bench/chunk_sequences.c (docs/BENCHMARKS.md).
 */
#define SF_CHACHA_CHUNK_SLICE 4096
#define SF_CHACHA_SLICED_RUN ((size_t)4 << 20)

static const char *const sf_cipher_names[SF_ALGORITHMS] = {
    "AES-128-GCM", "AES-256-GCM", "ChaCha20-Poly1305"};
static const size_t sf_key_lens[SF_ALGORITHMS] = {16, 32, 32};
/* Whether an update is two passes (cipher, then MAC): chunk runs then go in slices (above). */
static const int sf_two_pass[SF_ALGORITHMS] = {0, 0, 1};
static EVP_CIPHER *sf_ciphers[SF_ALGORITHMS];
/* HMAC's digests (sf_hmac_many), fetched once, by SF_DIGESTS index. */
static const char *const sf_digest_names[SF_DIGESTS] = {
    "SHA2-224", "SHA2-256", "SHA2-384", "SHA2-512", "SHA3-224", "SHA3-256", "SHA3-384", "SHA3-512"};
static EVP_MD *sf_digests[SF_DIGESTS];
/* HMAC, for C2SP's HKDF-Expand (sf_hkdf_expand_sha512); each thread keeps a context. */
static EVP_MAC *sf_hmac_alg;
static __thread EVP_MAC_CTX *sf_hmac;

/* Strategy x event counters, shared by every thread, updated atomically. */
static uint64_t sf_stats[SF_STRATEGIES][SF_EVENTS];

/*
 * A thread's cached context for one algorithm. Holders live in thread-local
 * storage and are freed by a pthread key destructor when the thread ends, so
 * a context can never be reached from a thread that does not own it.
 */
typedef struct {
    EVP_CIPHER_CTX *ctx;
    int alg;
    int ctx_strategy;
    int has_key;
    unsigned char key[32];
} sf_aead;

/* Output of small one-shot calls, so Python can copy it straight into a bytes object. */
static __thread unsigned char sf_scratch[SF_SCRATCH_LEN];
static __thread int sf_scratch_rc;

static int sf_strategy = SF_LAZY;
static pthread_key_t sf_tls_key;
static __thread sf_aead *sf_tls[SF_ALGORITHMS];

static void sf_count(int strategy, int event)
{
    __atomic_fetch_add(&sf_stats[strategy][event], 1, __ATOMIC_RELAXED);
}

unsigned long sf_openssl_version_num(void) { return OpenSSL_version_num(); }

/* Fetch the ciphers once per process; called at import, under the import lock. */
static void sf_drop_ctx(sf_aead *a)
{
    if (a->ctx == NULL)
        return;
    EVP_CIPHER_CTX_free(a->ctx);
    a->ctx = NULL;
    a->has_key = 0;
    OPENSSL_cleanse(a->key, sizeof(a->key));
    sf_count(a->ctx_strategy, SF_EV_FREED);
}

static void sf_thread_exit(void *unused)
{
    (void)unused;
    EVP_MAC_CTX_free(sf_hmac);
    sf_hmac = NULL;
    for (int i = 0; i < SF_ALGORITHMS; i++) {
        if (sf_tls[i] == NULL)
            continue;
        sf_drop_ctx(sf_tls[i]);
        OPENSSL_clear_free(sf_tls[i], sizeof(sf_aead));
        sf_tls[i] = NULL;
    }
}

static void sf_b64_init(void);

/* Fetch the ciphers once per process; called at import, under the import lock. */
int sf_init(void)
{
    static int done;
    if (done)
        return SF_OK;
    if (pthread_key_create(&sf_tls_key, sf_thread_exit) != 0)
        return SF_ERR_ARG;
    for (int i = 0; i < SF_ALGORITHMS; i++) {
        sf_ciphers[i] = EVP_CIPHER_fetch(NULL, sf_cipher_names[i], NULL);
        if (sf_ciphers[i] == NULL)
            return SF_ERR_OPENSSL;
    }
    if ((sf_hmac_alg = EVP_MAC_fetch(NULL, "HMAC", NULL)) == NULL)
        return SF_ERR_OPENSSL;
    for (int i = 0; i < SF_DIGESTS; i++) {
        sf_digests[i] = EVP_MD_fetch(NULL, sf_digest_names[i], NULL);
        if (sf_digests[i] == NULL || EVP_MD_get_size(sf_digests[i]) > SF_MAX_MD ||
            EVP_MD_get_block_size(sf_digests[i]) > SF_MAX_BLOCK)
            return SF_ERR_OPENSSL;
    }
    sf_b64_init();
    done = 1;
    return SF_OK;
}

void sf_stats_read(uint64_t *out)
{
    for (int s = 0; s < SF_STRATEGIES; s++)
        for (int e = 0; e < SF_EVENTS; e++)
            out[s * SF_EVENTS + e] = __atomic_load_n(&sf_stats[s][e], __ATOMIC_RELAXED);
}

void sf_set_strategy(int strategy) { __atomic_store_n(&sf_strategy, strategy, __ATOMIC_RELAXED); }

/* The calling thread's holder for alg, created on first use. */
static sf_aead *sf_holder(int alg)
{
    sf_aead *a = sf_tls[alg];
    if (a != NULL)
        return a;
    a = OPENSSL_zalloc(sizeof(*a));
    if (a == NULL)
        return NULL;
    if (pthread_setspecific(sf_tls_key, &sf_tls) != 0) {
        OPENSSL_free(a);
        return NULL;
    }
    a->alg = alg;
    sf_tls[alg] = a;
    return a;
}

/* Where the calling thread's context for alg lives (0 before first use); for ownership tests. */
uintptr_t sf_thread_context_id(int alg) { return (uintptr_t)sf_tls[alg]; }

/* Free the calling thread's contexts now (as thread exit would). */
void sf_thread_release(void) { sf_thread_exit(NULL); }

/*
 * Make a->ctx ready for one operation with `key` and `iv` in direction `enc`,
 * following the context strategy:
 *   same key as cached    -> re-init with the IV only (reused)
 *   LAZY, other key       -> re-key the existing context in place (rekeyed)
 *   otherwise             -> free any context, create and key a new one (created)
 */
static int sf_prepare(sf_aead *a, int strategy, const unsigned char *key, const unsigned char *iv,
                      int enc)
{
    size_t keylen = sf_key_lens[a->alg];
    if (a->ctx != NULL && a->ctx_strategy != strategy)
        sf_drop_ctx(a);
    if (a->ctx != NULL && a->has_key && CRYPTO_memcmp(a->key, key, keylen) == 0) {
        if (!EVP_CipherInit_ex2(a->ctx, NULL, NULL, iv, enc, NULL))
            goto fail;
        sf_count(strategy, SF_EV_REUSED);
        return SF_OK;
    }
    if (a->ctx != NULL && strategy == SF_LAZY) {
        a->has_key = 0;
        if (!EVP_CipherInit_ex2(a->ctx, NULL, key, iv, enc, NULL))
            goto fail;
        sf_count(strategy, SF_EV_REKEYED);
    } else {
        sf_drop_ctx(a);
        a->ctx = EVP_CIPHER_CTX_new();
        if (a->ctx == NULL)
            return SF_ERR_OPENSSL;
        a->ctx_strategy = strategy;
        sf_count(strategy, SF_EV_CREATED);
        if (!EVP_CipherInit_ex2(a->ctx, sf_ciphers[a->alg], key, iv, enc, NULL))
            goto fail;
    }
    memcpy(a->key, key, keylen);
    a->has_key = 1;
    return SF_OK;
fail:
    sf_drop_ctx(a);
    return SF_ERR_OPENSSL;
}

/* After an operation: EAGER frees; any failure drops the context so the next call starts clean. */
static int sf_finish(sf_aead *a, int strategy, int rc)
{
    if (rc == SF_ERR_OPENSSL || strategy == SF_EAGER)
        sf_drop_ctx(a);
    return rc;
}

static int sf_feed(EVP_CIPHER_CTX *ctx, unsigned char *out, const unsigned char *in, size_t len,
                   int slice)
{
    int outl;
    while (len > 0) {
        int n = len > (size_t)slice ? slice : (int)len;
        if (!EVP_CipherUpdate(ctx, out, &outl, in, n) || (out != NULL && outl != n))
            return SF_ERR_OPENSSL;
        if (out != NULL)
            out += n;
        in += n;
        len -= (size_t)n;
    }
    return SF_OK;
}

/* The tag travels as an OSSL_PARAM: EVP_CIPHER_CTX_ctrl would build the same param each call. */
static int sf_tag_param(EVP_CIPHER_CTX *ctx, unsigned char *tag, int set)
{
    OSSL_PARAM params[2];
    params[0] = OSSL_PARAM_construct_octet_string(OSSL_CIPHER_PARAM_AEAD_TAG, tag, SF_TAG_LEN);
    params[1] = OSSL_PARAM_construct_end();
    return set ? EVP_CIPHER_CTX_set_params(ctx, params) : EVP_CIPHER_CTX_get_params(ctx, params);
}

static int sf_seal_one(EVP_CIPHER_CTX *ctx, const unsigned char *aad, size_t aadlen,
                       const unsigned char *in, size_t inlen, unsigned char *out, int slice)
{
    int outl;
    if (aadlen > 0 && sf_feed(ctx, NULL, aad, aadlen, SF_SLICE) != SF_OK)
        return SF_ERR_OPENSSL;
    if (sf_feed(ctx, out, in, inlen, slice) != SF_OK)
        return SF_ERR_OPENSSL;
    if (!EVP_EncryptFinal_ex(ctx, out + inlen, &outl) || outl != 0)
        return SF_ERR_OPENSSL;
    if (!sf_tag_param(ctx, out + inlen, 0))
        return SF_ERR_OPENSSL;
    return SF_OK;
}

/* Plaintext lands in `out` before the tag is checked: on failure it is wiped. */
static int sf_open_one(EVP_CIPHER_CTX *ctx, const unsigned char *aad, size_t aadlen,
                       const unsigned char *in, size_t inlen, unsigned char *out, int slice)
{
    int outl;
    unsigned char tag[SF_TAG_LEN];
    memcpy(tag, in + inlen, SF_TAG_LEN);
    if (!sf_tag_param(ctx, tag, 1))
        return SF_ERR_OPENSSL;
    if (aadlen > 0 && sf_feed(ctx, NULL, aad, aadlen, SF_SLICE) != SF_OK)
        return SF_ERR_OPENSSL;
    if (sf_feed(ctx, out, in, inlen, slice) != SF_OK)
        return SF_ERR_OPENSSL;
    if (EVP_DecryptFinal_ex(ctx, out + inlen, &outl) <= 0) {
        OPENSSL_cleanse(out, inlen);
        ERR_clear_error();
        return SF_ERR_AUTH;
    }
    return SF_OK;
}

/*
 * The entry points below take the key at the algorithm's length and a 12-byte
 * nonce: the Python layer validates both once before calling.
 */

/* out (inlen + 16 bytes) may be the same memory as in. */
int sf_seal(int alg, const char *key, const char *nonce, const char *aad, size_t aadlen,
            const char *in, size_t inlen, char *out)
{
    int strategy = __atomic_load_n(&sf_strategy, __ATOMIC_RELAXED);
    sf_aead *a = sf_holder(alg);
    if (a == NULL)
        return SF_ERR_OPENSSL;
    int rc = sf_prepare(a, strategy, (const unsigned char *)key, (const unsigned char *)nonce, 1);
    if (rc != SF_OK)
        return rc;
    rc = sf_seal_one(a->ctx, (const unsigned char *)aad, aadlen, (const unsigned char *)in, inlen,
                     (unsigned char *)out, SF_SLICE);
    return sf_finish(a, strategy, rc);
}

/* in holds ctlen bytes of ciphertext followed by the 16-byte tag; out (ctlen bytes) may equal in. */
int sf_open(int alg, const char *key, const char *nonce, const char *aad, size_t aadlen,
            const char *in, size_t ctlen, char *out)
{
    int strategy = __atomic_load_n(&sf_strategy, __ATOMIC_RELAXED);
    sf_aead *a = sf_holder(alg);
    if (a == NULL)
        return SF_ERR_OPENSSL;
    int rc = sf_prepare(a, strategy, (const unsigned char *)key, (const unsigned char *)nonce, 0);
    if (rc != SF_OK)
        return rc;
    rc = sf_open_one(a->ctx, (const unsigned char *)aad, aadlen, (const unsigned char *)in, ctlen,
                     (unsigned char *)out, SF_SLICE);
    return sf_finish(a, strategy, rc);
}

/*
 * Small-message variants: the output goes to the thread's scratch buffer and
 * the pointer to it is returned (NULL on failure, reason in sf_scratch_error).
 * Python copies it into a bytes object at once, before anything else can run
 * on this thread. The scratch is not wiped after the copy: the bytes object
 * holds the same data for as long as the caller keeps it.
 */
const char *sf_seal_small(int alg, const char *key, const char *nonce, const char *aad,
                          size_t aadlen, const char *in, size_t inlen)
{
    if (inlen > SF_SCRATCH_LEN - SF_TAG_LEN) {
        sf_scratch_rc = SF_ERR_ARG;
        return NULL;
    }
    sf_scratch_rc = sf_seal(alg, key, nonce, aad, aadlen, in, inlen, (char *)sf_scratch);
    return sf_scratch_rc == SF_OK ? (const char *)sf_scratch : NULL;
}

const char *sf_open_small(int alg, const char *key, const char *nonce, const char *aad,
                          size_t aadlen, const char *in, size_t ctlen)
{
    if (ctlen > SF_SCRATCH_LEN) {
        sf_scratch_rc = SF_ERR_ARG;
        return NULL;
    }
    sf_scratch_rc = sf_open(alg, key, nonce, aad, aadlen, in, ctlen, (char *)sf_scratch);
    return sf_scratch_rc == SF_OK ? (const char *)sf_scratch : NULL;
}

int sf_scratch_error(void) { return sf_scratch_rc; }

static void sf_chunk_nonce(unsigned char nonce[SF_NONCE_LEN], const unsigned char *base, uint64_t counter)
{
    memcpy(nonce, base, SF_NONCE_LEN);
    for (int i = 0; i < 8; i++)
        nonce[SF_NONCE_LEN - 1 - i] ^= (unsigned char)(counter >> (8 * i));
}

/*
 * Seal or open a run of C2SP chunks numbered from `counter`, in one call.
 * Sealing: without `final`, inlen is a whole number of 16 KiB chunks; with it,
 * the run ends with the short final chunk (inlen % 16384 bytes, possibly
 * zero). Opening: without `final`, inlen is a whole number of 16400-byte
 * sealed chunks; with it, the run ends with the final chunk, whose sealed
 * length must be 16..16399 bytes. out must not overlap in. When opening fails,
 * every byte written to out is wiped.
 */
static int sf_chunks(int enc, int alg, const char *key, const char *base_nonce, uint64_t counter,
                     const char *in, size_t inlen, int final, char *out)
{
    const size_t unit = enc ? SF_CHUNK : SF_CHUNK_CT;
    const size_t full = inlen / unit, rest = inlen % unit;
    const size_t nchunks = full + (final ? 1 : 0);
    int strategy = __atomic_load_n(&sf_strategy, __ATOMIC_RELAXED);
    unsigned char nonce[SF_NONCE_LEN];
    const unsigned char *src = (const unsigned char *)in;
    unsigned char *dst = (unsigned char *)out;
    sf_aead *a;
    int rc;

    if (!final && (rest != 0 || full == 0))
        return SF_ERR_ARG;
    if (final && !enc && rest < SF_TAG_LEN)
        return SF_ERR_AUTH;
    if (counter >= SF_MAX_CHUNKS || nchunks > SF_MAX_CHUNKS - counter)
        return SF_ERR_LIMIT;
    if ((a = sf_holder(alg)) == NULL)
        return SF_ERR_OPENSSL;
    const int slice =
        sf_two_pass[alg] && inlen >= SF_CHACHA_SLICED_RUN ? SF_CHACHA_CHUNK_SLICE : SF_SLICE;
    sf_chunk_nonce(nonce, (const unsigned char *)base_nonce, counter);
    rc = sf_prepare(a, strategy, (const unsigned char *)key, nonce, enc);
    if (rc != SF_OK)
        return rc;
    for (size_t i = 0; i < nchunks; i++) {
        size_t len = i < full ? SF_CHUNK : (enc ? rest : rest - SF_TAG_LEN);
        if (i > 0) {
            sf_chunk_nonce(nonce, (const unsigned char *)base_nonce, counter + i);
            if (!EVP_CipherInit_ex2(a->ctx, NULL, NULL, nonce, enc, NULL)) {
                rc = SF_ERR_OPENSSL;
                break;
            }
        }
        rc = enc ? sf_seal_one(a->ctx, NULL, 0, src, len, dst, slice)
                 : sf_open_one(a->ctx, NULL, 0, src, len, dst, slice);
        if (rc != SF_OK)
            break;
        src += enc ? len : len + SF_TAG_LEN;
        dst += enc ? len + SF_TAG_LEN : len;
    }
    if (rc != SF_OK && !enc)
        OPENSSL_cleanse(out, (size_t)(dst - (unsigned char *)out));
    return sf_finish(a, strategy, rc);
}

int sf_chunks_seal(int alg, const char *key, const char *base_nonce, uint64_t counter,
                   const char *in, size_t inlen, int final, char *out)
{
    return sf_chunks(1, alg, key, base_nonce, counter, in, inlen, final, out);
}

int sf_chunks_open(int alg, const char *key, const char *base_nonce, uint64_t counter,
                   const char *in, size_t inlen, int final, char *out)
{
    return sf_chunks(0, alg, key, base_nonce, counter, in, inlen, final, out);
}

/*
 * Batches of records: one call seals or opens N independent messages under one
 * key and one cached context, each with its own random nonce.
 *
 * Records are described by a lengths array (u32 each) over one input buffer,
 * in which each record is preceded by a 4-byte big-endian length when
 * `in_framed` is set (the lengths array is then the parse of those fields, made
 * by sf_frames_scan; the loops never read a length field from the input).
 * Every size is computed, with overflow checks, in one pass before the cipher
 * loop (sf_plan); the loop itself checks no bounds.
 */

/* Nonces drawn per RAND_bytes call (12 KiB on the stack). */
#define SF_NONCE_BLOCK 1024
#define SF_SEALED_FIXED (SF_NONCE_LEN + SF_TAG_LEN)

static uint32_t sf_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void sf_put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/*
 * One pass over the `u32 length || bytes` records complete at the start of in (a stream's
 * batch: the last one may be cut off): their count and the bytes they take, and, with lens,
 * each one's length. With lens, the pass stops after room records (the caller goes on from
 * *used). SF_ERR_ARG as soon as a record declares more than max_len bytes, before its bytes
 * are waited for. A caller that needs in filled exactly compares *used with inlen.
 */
int sf_frames_scan(const char *in, size_t inlen, uint32_t max_len, uint32_t *lens, size_t room,
                   size_t *count, size_t *used)
{
    const unsigned char *p = (const unsigned char *)in;
    size_t pos = 0, n = 0;
    while (inlen - pos >= SF_FRAME_LEN) {
        uint32_t len = sf_be32(p + pos);
        if (len > max_len)
            return SF_ERR_ARG;
        if (len > inlen - pos - SF_FRAME_LEN)
            break;
        if (lens != NULL) {
            if (n == room)
                break;
            lens[n] = len;
        }
        pos += SF_FRAME_LEN + len;
        n++;
    }
    *count = n;
    *used = pos;
    return SF_OK;
}

/*
 * The size of a batch laid out record after record, each record taking
 * frame + fixed + len bytes (sealing, or describing an input) or
 * len - fixed bytes, 0 when shorter (opening: the plaintexts). With `offsets`
 * (count + 1 entries), where each record starts. A framed record must fit its
 * u32 length field. SF_ERR_ARG on any overflow.
 */
static int sf_plan(const uint32_t *lens, size_t count, size_t frame, size_t fixed, int open,
                   uint64_t *offsets, uint64_t *total)
{
    uint64_t pos = 0, size;
    for (size_t i = 0; i < count; i++) {
        if (offsets != NULL)
            offsets[i] = pos;
        if (open) {
            size = lens[i] >= fixed ? lens[i] - fixed : 0;
        } else {
            if (__builtin_add_overflow((uint64_t)lens[i], (uint64_t)fixed, &size))
                return SF_ERR_ARG;
            if (frame != 0 && fixed != 0 && size > UINT32_MAX)
                return SF_ERR_ARG;
            size += frame;
        }
        if (__builtin_add_overflow(pos, size, &pos))
            return SF_ERR_ARG;
    }
    if (pos > SIZE_MAX)
        return SF_ERR_ARG;
    if (offsets != NULL)
        offsets[count] = pos;
    *total = pos;
    return SF_OK;
}

int sf_records_size(const uint32_t *lens, size_t count, size_t frame, size_t fixed, int open,
                    uint64_t *total)
{
    return sf_plan(lens, count, frame, fixed, open, NULL, total);
}

/* in must hold exactly the records that lens describes. */
static int sf_check_input(const uint32_t *lens, size_t count, int in_framed, size_t inlen)
{
    uint64_t total;
    if (sf_plan(lens, count, in_framed ? SF_FRAME_LEN : 0, 0, 0, NULL, &total) != SF_OK)
        return SF_ERR_ARG;
    return total == inlen ? SF_OK : SF_ERR_ARG;
}

/*
 * Seal `count` records into out: each becomes [u32 length if out_framed] ||
 * prefix || nonce || ciphertext || tag, where prefix is the first prefixlen
 * bytes of aad and the whole of aad is each record's AAD (so the prefix is
 * authenticated, like the service's single-shot envelope). offsets gets
 * count + 1 entries: where each record's output starts, then the total. out
 * must not overlap in. Nonces are fresh from the CSPRNG for every record.
 */
static int sf_seal_batch(int alg, const char *key, const char *aad, size_t aadlen,
                         size_t prefixlen, const char *in, size_t inlen, const uint32_t *lens,
                         size_t count, int in_framed, int out_framed, char *out, size_t outlen,
                         uint64_t *offsets)
{
    const size_t inhdr = in_framed ? SF_FRAME_LEN : 0, outhdr = out_framed ? SF_FRAME_LEN : 0;
    const unsigned char *src = (const unsigned char *)in;
    unsigned char nonces[SF_NONCE_BLOCK * SF_NONCE_LEN];
    int strategy = __atomic_load_n(&sf_strategy, __ATOMIC_RELAXED);
    uint64_t total;
    sf_aead *a;
    int rc = SF_OK;

    if (prefixlen > aadlen || prefixlen > SIZE_MAX - SF_SEALED_FIXED)
        return SF_ERR_ARG;
    if (sf_check_input(lens, count, in_framed, inlen) != SF_OK)
        return SF_ERR_ARG;
    if (sf_plan(lens, count, outhdr, prefixlen + SF_SEALED_FIXED, 0, offsets, &total) != SF_OK ||
        total != outlen)
        return SF_ERR_ARG;
    if (count == 0)
        return SF_OK;
    if ((a = sf_holder(alg)) == NULL)
        return SF_ERR_OPENSSL;
    for (size_t i = 0; i < count; i++) {
        size_t j = i % SF_NONCE_BLOCK, len = lens[i];
        unsigned char *dst = (unsigned char *)out + offsets[i];
        if (j == 0) {
            size_t n = count - i < SF_NONCE_BLOCK ? count - i : SF_NONCE_BLOCK;
            if (RAND_bytes(nonces, (int)(n * SF_NONCE_LEN)) != 1) {
                rc = SF_ERR_OPENSSL;
                break;
            }
        }
        if (out_framed) {
            sf_put_be32(dst, (uint32_t)(prefixlen + SF_SEALED_FIXED + len));
            dst += SF_FRAME_LEN;
        }
        memcpy(dst, aad, prefixlen);
        dst += prefixlen;
        memcpy(dst, nonces + j * SF_NONCE_LEN, SF_NONCE_LEN);
        if (i == 0) {
            if ((rc = sf_prepare(a, strategy, (const unsigned char *)key, dst, 1)) != SF_OK)
                return rc;
        } else if (!EVP_CipherInit_ex2(a->ctx, NULL, NULL, dst, 1, NULL)) {
            rc = SF_ERR_OPENSSL;
            break;
        }
        src += inhdr;
        rc = sf_seal_one(a->ctx, (const unsigned char *)aad, aadlen, src, len, dst + SF_NONCE_LEN,
                         SF_SLICE);
        if (rc != SF_OK)
            break;
        src += len;
    }
    return sf_finish(a, strategy, rc);
}

/*
 * Open `count` records, each prefix || nonce || ciphertext || tag where prefix
 * is the first prefixlen bytes of aad and aad is the AAD. Record i's plaintext
 * goes to out at offsets[i] (offsets: count + 1 entries, laid out by sf_plan
 * from the lengths alone) and its status to status[i]: SF_REC_OK,
 * SF_REC_FAILED (authentication failed, or too short for nonce and tag), or
 * SF_REC_OTHER_PREFIX (does not start with the prefix). The output region of a
 * record that is not OK is all zeros. An OpenSSL error wipes all of out.
 */
static int sf_open_batch(int alg, const char *key, const char *aad, size_t aadlen,
                         size_t prefixlen, const char *in, size_t inlen, const uint32_t *lens,
                         size_t count, int in_framed, char *out, size_t outlen, uint64_t *offsets,
                         unsigned char *status)
{
    const size_t inhdr = in_framed ? SF_FRAME_LEN : 0;
    const unsigned char *src = (const unsigned char *)in;
    int strategy = __atomic_load_n(&sf_strategy, __ATOMIC_RELAXED);
    uint64_t total;
    sf_aead *a = NULL;
    int rc = SF_OK;

    if (prefixlen > aadlen || prefixlen > SIZE_MAX - SF_SEALED_FIXED)
        return SF_ERR_ARG;
    if (sf_check_input(lens, count, in_framed, inlen) != SF_OK)
        return SF_ERR_ARG;
    if (sf_plan(lens, count, 0, prefixlen + SF_SEALED_FIXED, 1, offsets, &total) != SF_OK ||
        total != outlen)
        return SF_ERR_ARG;
    for (size_t i = 0; i < count; i++) {
        size_t len = lens[i];
        unsigned char *dst = (unsigned char *)out + offsets[i];
        const unsigned char *rec = src + inhdr;
        src = rec + len;
        if (len < prefixlen || memcmp(rec, aad, prefixlen) != 0) {
            status[i] = SF_REC_OTHER_PREFIX;
            memset(dst, 0, (size_t)(offsets[i + 1] - offsets[i]));
            continue;
        }
        if (len < prefixlen + SF_SEALED_FIXED) {
            status[i] = SF_REC_FAILED;
            continue;
        }
        rec += prefixlen;
        if (a == NULL) {
            if ((a = sf_holder(alg)) == NULL) {
                rc = SF_ERR_OPENSSL;
                break;
            }
            if ((rc = sf_prepare(a, strategy, (const unsigned char *)key, rec, 0)) != SF_OK)
                break;
        } else if (!EVP_CipherInit_ex2(a->ctx, NULL, NULL, rec, 0, NULL)) {
            rc = SF_ERR_OPENSSL;
            break;
        }
        rc = sf_open_one(a->ctx, (const unsigned char *)aad, aadlen, rec + SF_NONCE_LEN,
                         len - prefixlen - SF_SEALED_FIXED, dst, SF_SLICE);
        if (rc == SF_ERR_AUTH) {
            status[i] = SF_REC_FAILED;
            rc = SF_OK;
        } else if (rc != SF_OK) {
            break;
        } else {
            status[i] = SF_REC_OK;
        }
    }
    if (rc != SF_OK)
        OPENSSL_cleanse(out, outlen);
    if (a == NULL || a->ctx == NULL)
        return rc;
    return sf_finish(a, strategy, rc);
}

/*
 * The entry points work on their own copy of the lengths: the caller's array
 * is Python-visible memory that another thread could change while the GIL is
 * released, and every bound is computed from the lengths once, at the start.
 */
static uint32_t *sf_own_lengths(const uint32_t *lens, size_t count)
{
    uint32_t *own;
    if (count > SIZE_MAX / sizeof(uint32_t))
        return NULL;
    own = OPENSSL_malloc(count == 0 ? 1 : count * sizeof(uint32_t));
    if (own != NULL && count > 0)
        memcpy(own, lens, count * sizeof(uint32_t));
    return own;
}

int sf_seal_many(int alg, const char *key, const char *aad, size_t aadlen, size_t prefixlen,
                 const char *in, size_t inlen, const uint32_t *lens, size_t count, int in_framed,
                 int out_framed, char *out, size_t outlen, uint64_t *offsets)
{
    uint32_t *own = sf_own_lengths(lens, count);
    if (own == NULL)
        return SF_ERR_OPENSSL;
    int rc = sf_seal_batch(alg, key, aad, aadlen, prefixlen, in, inlen, own, count, in_framed,
                           out_framed, out, outlen, offsets);
    OPENSSL_free(own);
    return rc;
}

int sf_open_many(int alg, const char *key, const char *aad, size_t aadlen, size_t prefixlen,
                 const char *in, size_t inlen, const uint32_t *lens, size_t count, int in_framed,
                 char *out, size_t outlen, uint64_t *offsets, unsigned char *status)
{
    uint32_t *own = sf_own_lengths(lens, count);
    if (own == NULL)
        return SF_ERR_OPENSSL;
    int rc = sf_open_batch(alg, key, aad, aadlen, prefixlen, in, inlen, own, count, in_framed,
                           out, outlen, offsets, status);
    OPENSSL_free(own);
    return rc;
}

/*
 * Batches as text: a column of standard padded base64 texts (RFC 4648, section 4) decoded in
 * one call, and sealed records written as base64 into a text template in one call, so that
 * a caller that speaks JSON makes no object per record on either side.
 *
 * The decoder takes canonical base64 only: the alphabet, a length that is a multiple of 4,
 * '=' only as the last one or two characters of a text, and zero bits after its last byte.
 * Anything else (line breaks, spaces, other bytes, non-zero trailing bits) refuses the whole
 * column, so that a caller with a more lenient decoder (Go's, which skips CR and LF) can take
 * such a batch its own way and report per text what is wrong.
 */
static const char sf_b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
/* Decoding: each byte's value shifted into its place in a 24-bit group (by its position in the
   group of 4), or SF_B64_BAD for a byte outside the alphabet: a group is 4 lookups OR-ed, and
   one test per text. Encoding: the two characters of each 12-bit value. sf_init fills both. */
#define SF_B64_BAD (1U << 24)
static uint32_t sf_b64_values[4][256];
static char sf_b64_pairs[4096][2];

static void sf_b64_init(void)
{
    for (int k = 0; k < 4; k++)
        for (int c = 0; c < 256; c++)
            sf_b64_values[k][c] = SF_B64_BAD;
    for (uint32_t i = 0; i < 64; i++)
        for (int k = 0; k < 4; k++)
            sf_b64_values[k][(unsigned char)sf_b64_alphabet[i]] = i << (18 - 6 * k);
    for (int i = 0; i < 4096; i++) {
        sf_b64_pairs[i][0] = sf_b64_alphabet[i >> 6];
        sf_b64_pairs[i][1] = sf_b64_alphabet[i & 0x3F];
    }
}

/* One canonical text of n bytes into out (room for n / 4 * 3 bytes); SF_ERR_ARG if it is not. */
static int sf_b64_decode(const unsigned char *s, size_t n, unsigned char *out, size_t *outn)
{
    const uint32_t(*v)[256] = sf_b64_values;
    size_t groups = n / 4, o = 0;
    uint32_t w, seen = 0;

    if (n % 4 != 0)
        return SF_ERR_ARG;
    *outn = 0;
    if (n == 0)
        return SF_OK;
    for (size_t g = 0; g + 1 < groups; g++, s += 4, o += 3) {
        w = v[0][s[0]] | v[1][s[1]] | v[2][s[2]] | v[3][s[3]];
        seen |= w; /* a bad byte anywhere sets SF_B64_BAD: tested once, after the loop */
        out[o] = (unsigned char)(w >> 16);
        out[o + 1] = (unsigned char)(w >> 8);
        out[o + 2] = (unsigned char)w;
    }
    /* The last group: xxxx, xxx= (the last 2 bits zero) or xx== (the last 4 bits zero). */
    size_t last = s[3] != '=' ? 3 : s[2] != '=' ? 2 : 1;
    w = v[0][s[0]] | v[1][s[1]];
    if (last > 1)
        w |= v[2][s[2]];
    if (last > 2)
        w |= v[3][s[3]];
    if (last == 2 && (w & 0xFF) != 0)
        return SF_ERR_ARG;
    if (last == 1 && (w & 0xFFFF) != 0)
        return SF_ERR_ARG;
    out[o] = (unsigned char)(w >> 16);
    if (last > 1)
        out[o + 1] = (unsigned char)(w >> 8);
    if (last > 2)
        out[o + 2] = (unsigned char)w;
    o += last;
    if ((seen | w) & SF_B64_BAD)
        return SF_ERR_ARG;
    *outn = o;
    return SF_OK;
}

/* Standard padded base64 of n bytes into out (4 * ceil(n / 3) bytes); returns the end. */
static unsigned char *sf_b64_encode(const unsigned char *in, size_t n, unsigned char *out)
{
    size_t i = 0;
    for (; i + 3 <= n; i += 3, out += 4) {
        uint32_t w = (uint32_t)in[i] << 16 | (uint32_t)in[i + 1] << 8 | in[i + 2];
        memcpy(out, sf_b64_pairs[w >> 12], 2);
        memcpy(out + 2, sf_b64_pairs[w & 0xFFF], 2);
    }
    if (i < n) {
        uint32_t w = (uint32_t)in[i] << 16 | (i + 1 < n ? (uint32_t)in[i + 1] << 8 : 0);
        memcpy(out, sf_b64_pairs[w >> 12], 2);
        out[2] = (unsigned char)(i + 1 < n ? sf_b64_pairs[w & 0xFFF][0] : '=');
        out[3] = '=';
        out += 4;
    }
    return out;
}

/*
 * Decode a column of base64 texts separated by the seplen bytes of sep into out, end to end:
 * lens[i] gets text i's decoded length, *count the number of texts, *used the bytes. sep[0]
 * must not be a base64 character (a text ends at the first sep[0], and the whole separator
 * must follow). lens has room for max_count texts; with `exact`, there must be exactly that
 * many (0: the column is empty). Otherwise an empty column is one empty text. SF_ERR_ARG if
 * a text is not canonical base64, a separator is cut short, the count is off, or out
 * (outlen bytes) is too small; out and lens are then left partly written, for the caller to
 * drop.
 */
int sf_base64_column(const char *in, size_t inlen, const char *sep, size_t seplen,
                     size_t max_count, int exact, char *out, size_t outlen, uint32_t *lens,
                     size_t *count, size_t *used)
{
    const unsigned char *p = (const unsigned char *)in, *end = p + inlen;
    const unsigned char first = seplen > 0 ? (unsigned char)sep[0] : 0;
    size_t o = 0, n, i = 0;

    if (seplen == 0 || sf_b64_values[0][first] != SF_B64_BAD || first == '=')
        return SF_ERR_ARG;
    if (exact && max_count == 0) {
        *count = *used = 0;
        return inlen == 0 ? SF_OK : SF_ERR_ARG;
    }
    for (;;) {
        const unsigned char *stop = memchr(p, first, (size_t)(end - p));
        if (stop == NULL)
            stop = end;
        if (i == max_count)
            return SF_ERR_ARG; /* more texts than lens holds */
        n = (size_t)(stop - p);
        if (n / 4 * 3 > outlen - o || n / 4 * 3 > UINT32_MAX)
            return SF_ERR_ARG;
        if (sf_b64_decode(p, n, (unsigned char *)out + o, &n) != SF_OK)
            return SF_ERR_ARG;
        lens[i++] = (uint32_t)n;
        o += n;
        if (stop == end)
            break;
        if ((size_t)(end - stop) < seplen || memcmp(stop, sep, seplen) != 0)
            return SF_ERR_ARG;
        p = stop + seplen;
    }
    if (exact && i != max_count)
        return SF_ERR_ARG;
    *count = i;
    *used = o;
    return SF_OK;
}

/*
 * The size of sf_seal_many_text's output: head, then for each record before || base64 of
 * (fixed + lens[i]) bytes || after (after_lens[i] bytes each, or afterlen for every record
 * when after_lens is NULL), sep between records, then tail. SF_ERR_ARG on any overflow.
 */
int sf_text_size(const uint32_t *lens, size_t count, size_t fixed, size_t beforelen,
                 size_t afterlen, const uint32_t *after_lens, size_t seplen, size_t headlen,
                 size_t taillen, uint64_t *total)
{
    uint64_t pos = 0, size;
    if (__builtin_add_overflow((uint64_t)headlen, (uint64_t)taillen, &pos))
        return SF_ERR_ARG;
    for (size_t i = 0; i < count; i++) {
        uint64_t sealed = (uint64_t)lens[i] + fixed; /* a u32 plus a small constant */
        size = (sealed / 3 + (sealed % 3 != 0)) * 4;
        if (__builtin_add_overflow(size, (uint64_t)beforelen, &size) ||
            __builtin_add_overflow(size, after_lens != NULL ? (uint64_t)after_lens[i] : afterlen,
                                   &size) ||
            __builtin_add_overflow(size, i > 0 ? (uint64_t)seplen : 0, &size) ||
            __builtin_add_overflow(pos, size, &pos))
            return SF_ERR_ARG;
    }
    if (pos > SIZE_MAX)
        return SF_ERR_ARG;
    *total = pos;
    return SF_OK;
}

static unsigned char *sf_put(unsigned char *dst, const char *src, size_t n)
{
    memcpy(dst, src, n);
    return dst + n;
}

static int sf_seal_text(int alg, const char *key, const char *aad, size_t aadlen,
                        const char *in, size_t inlen, const uint32_t *lens, size_t count,
                        const char *before, size_t beforelen, const char *after,
                        size_t afterlen, const uint32_t *after_lens, const char *sep,
                        size_t seplen, const char *head, size_t headlen, const char *tail,
                        size_t taillen, char *out, size_t outlen)
{
    const unsigned char *src = (const unsigned char *)in;
    unsigned char *dst = (unsigned char *)out, *sealed = NULL;
    unsigned char nonces[SF_NONCE_BLOCK * SF_NONCE_LEN];
    int strategy = __atomic_load_n(&sf_strategy, __ATOMIC_RELAXED);
    const char *suffix = after;
    uint64_t total, afters = 0;
    size_t longest = 0;
    sf_aead *a = NULL;
    int rc = SF_OK;

    /* Every bound, once: the records fill in, the suffixes fill after, the text fills out. */
    if (sf_check_input(lens, count, 0, inlen) != SF_OK)
        return SF_ERR_ARG;
    if (after_lens != NULL) {
        for (size_t i = 0; i < count; i++)
            afters += after_lens[i]; /* count u32s: no overflow of a u64 */
        if (afters != afterlen)
            return SF_ERR_ARG;
    }
    if (sf_text_size(lens, count, SF_SEALED_FIXED, beforelen, afterlen, after_lens, seplen,
                     headlen, taillen, &total) != SF_OK ||
        total != outlen)
        return SF_ERR_ARG;
    for (size_t i = 0; i < count; i++)
        longest = lens[i] > longest ? lens[i] : longest;
    /* nonce || ciphertext || tag of one record, before it is encoded. */
    if ((sealed = OPENSSL_malloc(longest + SF_SEALED_FIXED)) == NULL)
        return SF_ERR_OPENSSL;
    dst = sf_put(dst, head, headlen);
    for (size_t i = 0; i < count; i++) {
        size_t j = i % SF_NONCE_BLOCK, len = lens[i];
        size_t suffixlen = after_lens != NULL ? after_lens[i] : afterlen;
        if (j == 0) {
            size_t n = count - i < SF_NONCE_BLOCK ? count - i : SF_NONCE_BLOCK;
            if (RAND_bytes(nonces, (int)(n * SF_NONCE_LEN)) != 1) {
                rc = SF_ERR_OPENSSL;
                break;
            }
        }
        memcpy(sealed, nonces + j * SF_NONCE_LEN, SF_NONCE_LEN);
        if (a == NULL) {
            if ((a = sf_holder(alg)) == NULL) {
                rc = SF_ERR_OPENSSL;
                break;
            }
            if ((rc = sf_prepare(a, strategy, (const unsigned char *)key, sealed, 1)) != SF_OK)
                break;
        } else if (!EVP_CipherInit_ex2(a->ctx, NULL, NULL, sealed, 1, NULL)) {
            rc = SF_ERR_OPENSSL;
            break;
        }
        rc = sf_seal_one(a->ctx, (const unsigned char *)aad, aadlen, src, len,
                         sealed + SF_NONCE_LEN, SF_SLICE);
        if (rc != SF_OK)
            break;
        src += len;
        if (i > 0)
            dst = sf_put(dst, sep, seplen);
        dst = sf_put(dst, before, beforelen);
        dst = sf_b64_encode(sealed, len + SF_SEALED_FIXED, dst);
        dst = sf_put(dst, suffix, suffixlen);
        if (after_lens != NULL)
            suffix += suffixlen;
    }
    if (rc == SF_OK)
        dst = sf_put(dst, tail, taillen);
    OPENSSL_free(sealed);
    if (rc == SF_OK && dst != (unsigned char *)out + outlen)
        rc = SF_ERR_ARG; /* cannot happen: the size was planned from the same lengths */
    if (a == NULL || a->ctx == NULL)
        return rc;
    return sf_finish(a, strategy, rc);
}

/*
 * Seal `count` records (laid end to end in `in`, lengths in lens) under one key and one
 * cached context, each with a fresh random nonce and the AAD aad, and write them as text
 * into out (exactly sf_text_size bytes): head, then per record before || base64(nonce ||
 * ciphertext || tag) || its suffix (from `after`: after_lens[i] bytes each, or all of it for
 * every record when after_lens is NULL), sep between records, then tail. out must not
 * overlap any input; on failure the caller drops it.
 */
int sf_seal_many_text(int alg, const char *key, const char *aad, size_t aadlen, const char *in,
                      size_t inlen, const uint32_t *lens, size_t count, const char *before,
                      size_t beforelen, const char *after, size_t afterlen,
                      const uint32_t *after_lens, const char *sep, size_t seplen,
                      const char *head, size_t headlen, const char *tail, size_t taillen,
                      char *out, size_t outlen)
{
    uint32_t *own = sf_own_lengths(lens, count), *own_after = NULL;
    int rc = SF_ERR_OPENSSL;
    if (own == NULL)
        return rc;
    if (after_lens != NULL && (own_after = sf_own_lengths(after_lens, count)) == NULL)
        goto done;
    rc = sf_seal_text(alg, key, aad, aadlen, in, inlen, own, count, before, beforelen, after,
                      afterlen, own_after, sep, seplen, head, headlen, tail, taillen, out,
                      outlen);
done:
    OPENSSL_free(own);
    OPENSSL_free(own_after);
    return rc;
}

void sf_cleanse(char *buf, size_t len) { OPENSSL_cleanse(buf, len); }

/*
 * A large output buffer that was just allocated (the bytes object that the bytes API
 * returns) is fresh memory: the kernel faults it in page by page as the cipher writes it,
 * about 16,000 faults for 64 MiB, which cost more than sealing it (docs/BENCHMARKS.md).
 * Ask for transparent huge pages on the 2 MiB-aligned part of it, so the same memory comes
 * in 2 MiB faults. Advice only: where the kernel has no THP (EINVAL) nothing changes, so the
 * result is deliberately not an error.
 */
#define SF_HUGE_PAGE ((uintptr_t)2 * 1024 * 1024)
void sf_advise_huge(char *buf, size_t len)
{
#ifdef MADV_HUGEPAGE
    uintptr_t start = ((uintptr_t)buf + SF_HUGE_PAGE - 1) & ~(SF_HUGE_PAGE - 1);
    uintptr_t end = ((uintptr_t)buf + len) & ~(SF_HUGE_PAGE - 1);
    if (end > start)
        (void)madvise((void *)start, (size_t)(end - start), MADV_HUGEPAGE);
#else
    (void)buf;
    (void)len;
#endif
}

/*
 * HKDF-Expand with HMAC-SHA-512 (RFC 5869), for the C2SP chunked key derivation: outlen
 * (at most SF_HKDF_MAX) bytes of T(1) || T(2), T(i) = HMAC(key, T(i-1) || info || i).
 * Python's hmac.digest fetches HMAC and SHA-512 on every call under OpenSSL 3.0 (about
 * 2.5 us each, 5.7 us per message); here they are fetched once and the thread's MAC context
 * is kept, like its cipher contexts (freed when the thread ends).
 */
int sf_hkdf_expand_sha512(const char *key, size_t keylen, const char *info, size_t infolen,
                          char *out, size_t outlen)
{
    unsigned char block[64], counter;
    size_t done = 0, blen;
    int rc = SF_ERR_OPENSSL;

    if (outlen > SF_HKDF_MAX)
        return SF_ERR_ARG;
    if (sf_hmac == NULL) {
        OSSL_PARAM params[2];
        params[0] = OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA512", 0);
        params[1] = OSSL_PARAM_construct_end();
        if (pthread_getspecific(sf_tls_key) == NULL &&
            pthread_setspecific(sf_tls_key, &sf_tls) != 0)
            return SF_ERR_ARG;
        if ((sf_hmac = EVP_MAC_CTX_new(sf_hmac_alg)) == NULL)
            return SF_ERR_OPENSSL;
        if (!EVP_MAC_CTX_set_params(sf_hmac, params))
            goto done;
    }
    for (counter = 1; done < outlen; counter++) {
        size_t n = outlen - done < sizeof(block) ? outlen - done : sizeof(block);
        /* The key is set once; a NULL key restarts the MAC with the same key. */
        if (!EVP_MAC_init(sf_hmac, counter == 1 ? (const unsigned char *)key : NULL,
                          counter == 1 ? keylen : 0, NULL))
            goto done;
        if (counter > 1 && !EVP_MAC_update(sf_hmac, block, sizeof(block)))
            goto done;
        if (!EVP_MAC_update(sf_hmac, (const unsigned char *)info, infolen) ||
            !EVP_MAC_update(sf_hmac, &counter, 1))
            goto done;
        if (!EVP_MAC_final(sf_hmac, block, &blen, sizeof(block)) || blen != sizeof(block))
            goto done;
        memcpy(out + done, block, n);
        done += n;
    }
    rc = SF_OK;
done:
    OPENSSL_cleanse(block, sizeof(block));
    if (rc != SF_OK) {
        EVP_MAC_CTX_free(sf_hmac); /* start clean next time */
        sf_hmac = NULL;
    }
    return rc;
}

/*
 * HMAC (RFC 2104) of many records under one key: the hashes of key^ipad and key^opad are
 * computed once per call, and each record's HMAC starts from copies of them (two digest
 * blocks saved per record). SHA-2 copies plain SHA256_CTX/SHA512_CTX states through the
 * low-level API: deprecated since OpenSSL 3.0 but kept in every 3.x, and per 100-byte record
 * 255 ns against 389 ns for EVP_MD_CTX_copy_ex (which frees and allocates the provider's state
 * on every copy) and 450 ns for an EVP_MAC re-initialised per record (docs/BENCHMARKS.md,
 * "HMAC of records"). SHA-3 has no such API: it goes through EVP_MD.
 */
int sf_digest_size(int digest)
{
    return digest < 0 || digest >= SF_DIGESTS ? 0 : EVP_MD_get_size(sf_digests[digest]);
}

/* Indices below this are SHA-2 (SHA2-224 and -256 on SHA256_CTX, -384 and -512 on SHA512_CTX). */
#define SF_SHA2_DIGESTS 4

/* The key as HMAC's block: hashed first if longer than the block, then zero-padded. */
static int sf_hmac_block(const EVP_MD *md, const unsigned char *key, size_t keylen,
                         unsigned char block[SF_MAX_BLOCK])
{
    const size_t bs = (size_t)EVP_MD_get_block_size(md);
    unsigned int n;
    memset(block, 0, SF_MAX_BLOCK);
    if (keylen <= bs) {
        if (keylen > 0)
            memcpy(block, key, keylen);
        return SF_OK;
    }
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx != NULL && EVP_DigestInit_ex2(ctx, md, NULL) &&
             EVP_DigestUpdate(ctx, key, keylen) && EVP_DigestFinal_ex(ctx, block, &n);
    EVP_MD_CTX_free(ctx);
    return ok ? SF_OK : SF_ERR_OPENSSL;
}

/* Where each record's input and output are: the loops below share this walk. */
typedef struct {
    const unsigned char *src;
    unsigned char *dst;
    size_t inhdr, mdlen;
    int out_framed;
} sf_walk;

static unsigned char *sf_walk_next(sf_walk *w, size_t len, const unsigned char **in)
{
    unsigned char *tag;
    *in = w->src + w->inhdr;
    w->src = *in + len;
    if (w->out_framed) {
        sf_put_be32(w->dst, (uint32_t)w->mdlen);
        w->dst += SF_FRAME_LEN;
    }
    tag = w->dst;
    w->dst += w->mdlen;
    return tag;
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static int sf_hmac_sha256(int digest, unsigned char block[SF_MAX_BLOCK], const uint32_t *lens,
                          size_t count, sf_walk *w)
{
    SHA256_CTX inner, outer, work;
    unsigned char mid[SHA256_DIGEST_LENGTH];
    const unsigned char *in;
    int (*init)(SHA256_CTX *) = digest == 0 ? SHA224_Init : SHA256_Init;
    int ok = init(&inner) && init(&outer);

    for (size_t i = 0; i < SHA256_CBLOCK; i++)
        block[i] ^= 0x36;
    ok = ok && SHA256_Update(&inner, block, SHA256_CBLOCK);
    for (size_t i = 0; i < SHA256_CBLOCK; i++)
        block[i] ^= 0x36 ^ 0x5c;
    ok = ok && SHA256_Update(&outer, block, SHA256_CBLOCK);
    for (size_t i = 0; ok && i < count; i++) {
        unsigned char *tag = sf_walk_next(w, lens[i], &in);
        work = inner; /* SHA224's states end in SHA256_Final too, at their own length */
        ok = SHA256_Update(&work, in, lens[i]) && SHA256_Final(mid, &work);
        work = outer;
        ok = ok && SHA256_Update(&work, mid, w->mdlen) && SHA256_Final(tag, &work);
    }
    OPENSSL_cleanse(&inner, sizeof(inner));
    OPENSSL_cleanse(&outer, sizeof(outer));
    OPENSSL_cleanse(&work, sizeof(work));
    OPENSSL_cleanse(mid, sizeof(mid));
    return ok ? SF_OK : SF_ERR_OPENSSL;
}

static int sf_hmac_sha512(int digest, unsigned char block[SF_MAX_BLOCK], const uint32_t *lens,
                          size_t count, sf_walk *w)
{
    SHA512_CTX inner, outer, work;
    unsigned char mid[SHA512_DIGEST_LENGTH];
    const unsigned char *in;
    int (*init)(SHA512_CTX *) = digest == 2 ? SHA384_Init : SHA512_Init;
    int ok = init(&inner) && init(&outer);

    for (size_t i = 0; i < SHA512_CBLOCK; i++)
        block[i] ^= 0x36;
    ok = ok && SHA512_Update(&inner, block, SHA512_CBLOCK);
    for (size_t i = 0; i < SHA512_CBLOCK; i++)
        block[i] ^= 0x36 ^ 0x5c;
    ok = ok && SHA512_Update(&outer, block, SHA512_CBLOCK);
    for (size_t i = 0; ok && i < count; i++) {
        unsigned char *tag = sf_walk_next(w, lens[i], &in);
        work = inner; /* SHA384's states end in SHA512_Final too, at their own length */
        ok = SHA512_Update(&work, in, lens[i]) && SHA512_Final(mid, &work);
        work = outer;
        ok = ok && SHA512_Update(&work, mid, w->mdlen) && SHA512_Final(tag, &work);
    }
    OPENSSL_cleanse(&inner, sizeof(inner));
    OPENSSL_cleanse(&outer, sizeof(outer));
    OPENSSL_cleanse(&work, sizeof(work));
    OPENSSL_cleanse(mid, sizeof(mid));
    return ok ? SF_OK : SF_ERR_OPENSSL;
}
#pragma GCC diagnostic pop

/* Any digest through EVP_MD: hash(key^ipad) and hash(key^opad) in two contexts, copied. */
static int sf_hmac_evp(const EVP_MD *md, unsigned char block[SF_MAX_BLOCK], const uint32_t *lens,
                       size_t count, sf_walk *w)
{
    const size_t bs = (size_t)EVP_MD_get_block_size(md);
    EVP_MD_CTX *inner = EVP_MD_CTX_new(), *outer = EVP_MD_CTX_new(), *work = EVP_MD_CTX_new();
    unsigned char mid[SF_MAX_MD];
    const unsigned char *in;
    unsigned int n, m;
    int ok = inner != NULL && outer != NULL && work != NULL;

    for (size_t i = 0; i < bs; i++)
        block[i] ^= 0x36;
    ok = ok && EVP_DigestInit_ex2(inner, md, NULL) && EVP_DigestUpdate(inner, block, bs);
    for (size_t i = 0; i < bs; i++)
        block[i] ^= 0x36 ^ 0x5c;
    ok = ok && EVP_DigestInit_ex2(outer, md, NULL) && EVP_DigestUpdate(outer, block, bs);
    for (size_t i = 0; ok && i < count; i++) {
        unsigned char *tag = sf_walk_next(w, lens[i], &in);
        ok = EVP_MD_CTX_copy_ex(work, inner) && EVP_DigestUpdate(work, in, lens[i]) &&
             EVP_DigestFinal_ex(work, mid, &n) && EVP_MD_CTX_copy_ex(work, outer) &&
             EVP_DigestUpdate(work, mid, n) && EVP_DigestFinal_ex(work, tag, &m);
    }
    EVP_MD_CTX_free(inner); /* each frees (and the provider wipes) its digest state */
    EVP_MD_CTX_free(outer);
    EVP_MD_CTX_free(work);
    OPENSSL_cleanse(mid, sizeof(mid));
    return ok ? SF_OK : SF_ERR_OPENSSL;
}

static int sf_hmac_batch(int digest, const char *key, size_t keylen, const char *in,
                         size_t inlen, const uint32_t *lens, size_t count, int in_framed,
                         int out_framed, char *out, size_t outlen)
{
    unsigned char block[SF_MAX_BLOCK];
    sf_walk w;
    size_t each;
    int rc;

    if (digest < 0 || digest >= SF_DIGESTS)
        return SF_ERR_ARG;
    w.src = (const unsigned char *)in;
    w.dst = (unsigned char *)out;
    w.inhdr = in_framed ? SF_FRAME_LEN : 0;
    w.mdlen = (size_t)EVP_MD_get_size(sf_digests[digest]);
    w.out_framed = out_framed;
    each = (out_framed ? SF_FRAME_LEN : 0) + w.mdlen;
    if (sf_check_input(lens, count, in_framed, inlen) != SF_OK || count > SIZE_MAX / each ||
        count * each != outlen)
        return SF_ERR_ARG;
    if (count == 0)
        return SF_OK;
    rc = sf_hmac_block(sf_digests[digest], (const unsigned char *)key, keylen, block);
    if (rc == SF_OK && digest < 2)
        rc = sf_hmac_sha256(digest, block, lens, count, &w);
    else if (rc == SF_OK && digest < SF_SHA2_DIGESTS)
        rc = sf_hmac_sha512(digest, block, lens, count, &w);
    else if (rc == SF_OK)
        rc = sf_hmac_evp(sf_digests[digest], block, lens, count, &w);
    OPENSSL_cleanse(block, sizeof(block));
    if (rc != SF_OK)
        OPENSSL_cleanse(out, outlen);
    return rc;
}

/*
 * One message: the same loops as a batch of one, with no length array to copy and the tag
 * in the scratch buffer. hashlib's one-shot HMAC (OpenSSL 3's HMAC(), which fetches the MAC
 * and its digest and builds a context on every call) cost 2.5-3 us more for 1 KiB.
 */
const char *sf_hmac_small(int digest, const char *key, size_t keylen, const char *in,
                          size_t inlen)
{
    uint32_t len = (uint32_t)inlen;
    size_t size = (size_t)sf_digest_size(digest);
    if (size == 0 || inlen > UINT32_MAX) {
        sf_scratch_rc = SF_ERR_ARG;
        return NULL;
    }
    sf_scratch_rc =
        sf_hmac_batch(digest, key, keylen, in, inlen, &len, 1, 0, 0, (char *)sf_scratch, size);
    return sf_scratch_rc == SF_OK ? (const char *)sf_scratch : NULL;
}

int sf_hmac_many(int digest, const char *key, size_t keylen, const char *in, size_t inlen,
                 const uint32_t *lens, size_t count, int in_framed, int out_framed, char *out,
                 size_t outlen)
{
    uint32_t *own = sf_own_lengths(lens, count);
    if (own == NULL)
        return SF_ERR_OPENSSL;
    int rc = sf_hmac_batch(digest, key, keylen, in, inlen, own, count, in_framed, out_framed,
                           out, outlen);
    OPENSSL_free(own);
    return rc;
}
