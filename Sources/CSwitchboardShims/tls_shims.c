#include "CSwitchboardTLSShims.h"

long switchboard_SSL_set_tlsext_host_name(SSL *ssl, const char *name) {
    return SSL_set_tlsext_host_name(ssl, name);
}
int switchboard_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_min_proto_version(ctx, version);
}
long switchboard_SSL_CTX_set_mode(SSL_CTX *ctx, long mode) { return SSL_CTX_set_mode(ctx, mode); }
long switchboard_SSL_set_mode(SSL *ssl, long mode) { return SSL_set_mode(ssl, mode); }
size_t switchboard_BIO_pending(BIO *bio) { return (size_t)BIO_pending(bio); }
long switchboard_BIO_set_mem_eof_return(BIO *bio, long value) { return BIO_set_mem_eof_return(bio, value); }

long switchboard_SSL_MODE_RELEASE_BUFFERS(void) { return (long)SSL_MODE_RELEASE_BUFFERS; }
long switchboard_SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER(void) { return (long)SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER; }
long switchboard_SSL_MODE_ENABLE_PARTIAL_WRITE(void) { return (long)SSL_MODE_ENABLE_PARTIAL_WRITE; }
uint64_t switchboard_SSL_OP_NO_RENEGOTIATION(void) { return (uint64_t)SSL_OP_NO_RENEGOTIATION; }
uint64_t switchboard_SSL_OP_NO_COMPRESSION(void) { return (uint64_t)SSL_OP_NO_COMPRESSION; }
