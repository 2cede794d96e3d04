#ifndef SWITCHBOARD_TLS_SHIMS_H
#define SWITCHBOARD_TLS_SHIMS_H
// Wrappers for OpenSSL function-like macros (SSL_ctrl / BIO_ctrl based) that
// Swift cannot import, plus constants defined via function-like macros.
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <openssl/bio.h>
#include <stdint.h>

/// SSL_set_tlsext_host_name (SNI). Returns 1 on success.
long switchboard_SSL_set_tlsext_host_name(SSL *ssl, const char *name);
/// SSL_CTX_set_min_proto_version. Returns 1 on success.
int switchboard_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version);
/// SSL_CTX_set_mode / SSL_set_mode: returns the new mode bitmask.
long switchboard_SSL_CTX_set_mode(SSL_CTX *ctx, long mode);
long switchboard_SSL_set_mode(SSL *ssl, long mode);
/// BIO_pending (bytes waiting to be read from a BIO).
size_t switchboard_BIO_pending(BIO *bio);
/// BIO_set_mem_eof_return: -1 makes an empty memory BIO signal "retry" instead of EOF.
long switchboard_BIO_set_mem_eof_return(BIO *bio, long value);

/// Mode and option bits (some are defined through function-like macros).
long switchboard_SSL_MODE_RELEASE_BUFFERS(void);
long switchboard_SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER(void);
long switchboard_SSL_MODE_ENABLE_PARTIAL_WRITE(void);
uint64_t switchboard_SSL_OP_NO_RENEGOTIATION(void);
uint64_t switchboard_SSL_OP_NO_COMPRESSION(void);

#endif
