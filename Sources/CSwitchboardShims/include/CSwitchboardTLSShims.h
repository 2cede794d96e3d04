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

/// SSL_CTX_set_max_proto_version. Returns 1 on success.
int switchboard_SSL_CTX_set_max_proto_version(SSL_CTX *ctx, int version);

/// Loads a PEM private key into `ctx`, decrypting it with `passphrase` when it is encrypted
/// (NULL: the key must be unencrypted; OpenSSL never prompts). Returns 1 on success.
int switchboard_SSL_CTX_use_PEM_private_key(SSL_CTX *ctx, const char *path, const char *passphrase);

/// Sets the CA names a server sends when it asks for a client certificate, from a PEM file.
/// Returns 1 on success.
int switchboard_SSL_CTX_set_client_CA_file(SSL_CTX *ctx, const char *path);

/// The certificate's subject in RFC 4514 form (most specific first, e.g. "CN=alice,O=Example"),
/// written into `buffer` NUL-terminated and truncated to `size`. Returns the full length, or -1.
int switchboard_X509_subject_rfc4514(X509 *cert, char *buffer, size_t size);

/// The certificate's subject alternative names as "DNS:name", "IP:address", "email:address"
/// and "URI:uri" entries, each NUL-terminated, one after another in `buffer` (names with an
/// embedded NUL, and other kinds, are skipped). Returns the bytes written (never more than
/// `size`), 0 when there are none.
int switchboard_X509_subject_alt_names(X509 *cert, char *buffer, size_t size);

/// SHA-256 of the certificate's DER-encoded SubjectPublicKeyInfo into `out` (32 bytes).
/// Returns 1 on success.
int switchboard_X509_spki_sha256(X509 *cert, unsigned char out[32]);

/// The number of certificates in `chain` (0 for NULL) and the one at `index`.
int switchboard_cert_chain_count(STACK_OF(X509) *chain);
X509 *switchboard_cert_chain_at(STACK_OF(X509) *chain, int index);

#endif
