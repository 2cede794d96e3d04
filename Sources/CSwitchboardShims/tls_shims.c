#include "CSwitchboardTLSShims.h"
#include <arpa/inet.h>
#include <string.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

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

int switchboard_SSL_CTX_set_max_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_max_proto_version(ctx, version);
}

int switchboard_SSL_CTX_use_PEM_private_key(SSL_CTX *ctx, const char *path, const char *passphrase) {
    BIO *bio = BIO_new_file(path, "r");
    if (bio == NULL) return 0;
    // With no callback, OpenSSL takes `u` as the NUL-terminated passphrase. An empty one is
    // passed for NULL so that an encrypted key fails instead of prompting on the terminal.
    EVP_PKEY *key = PEM_read_bio_PrivateKey(bio, NULL, NULL, (void *)(passphrase ? passphrase : ""));
    BIO_free(bio);
    if (key == NULL) return 0;
    int rc = SSL_CTX_use_PrivateKey(ctx, key);
    EVP_PKEY_free(key);
    return rc;
}

int switchboard_SSL_CTX_set_client_CA_file(SSL_CTX *ctx, const char *path) {
    STACK_OF(X509_NAME) *names = SSL_load_client_CA_file(path);
    if (names == NULL) return 0;
    SSL_CTX_set_client_CA_list(ctx, names);  // takes ownership
    return 1;
}

int switchboard_X509_subject_rfc4514(X509 *cert, char *buffer, size_t size) {
    if (cert == NULL || buffer == NULL || size == 0) return -1;
    X509_NAME *name = X509_get_subject_name(cert);
    BIO *bio = BIO_new(BIO_s_mem());
    if (name == NULL || bio == NULL) { BIO_free(bio); return -1; }
    // RFC 2253 flags (the same rules as RFC 4514): most specific first, escaped, UTF-8.
    int flags = (int)(XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB);
    if (X509_NAME_print_ex(bio, name, 0, (unsigned long)flags) < 0) { BIO_free(bio); return -1; }
    char *data = NULL;
    long length = BIO_get_mem_data(bio, &data);
    if (length < 0 || data == NULL) { BIO_free(bio); return -1; }
    size_t copy = (size_t)length < size - 1 ? (size_t)length : size - 1;
    memcpy(buffer, data, copy);
    buffer[copy] = 0;
    BIO_free(bio);
    return (int)length;
}

static size_t append_entry(char *buffer, size_t size, size_t used, const char *prefix,
                           const unsigned char *value, int signedLength) {
    if (value == NULL || signedLength < 0) return used;
    size_t length = (size_t)signedLength;
    size_t prefixLength = strlen(prefix);
    if (memchr(value, 0, length) != NULL) return used;  // embedded NUL: skipped
    if (used + prefixLength + length + 1 > size) return used;
    memcpy(buffer + used, prefix, prefixLength);
    memcpy(buffer + used + prefixLength, value, length);
    buffer[used + prefixLength + length] = 0;
    return used + prefixLength + length + 1;
}

int switchboard_X509_subject_alt_names(X509 *cert, char *buffer, size_t size) {
    if (cert == NULL || buffer == NULL) return 0;
    GENERAL_NAMES *names = X509_get_ext_d2i(cert, NID_subject_alt_name, NULL, NULL);
    if (names == NULL) return 0;
    size_t used = 0;
    for (int i = 0; i < sk_GENERAL_NAME_num(names); i++) {
        const GENERAL_NAME *name = sk_GENERAL_NAME_value(names, i);
        switch (name->type) {
        case GEN_DNS:
            used = append_entry(buffer, size, used, "DNS:", ASN1_STRING_get0_data(name->d.dNSName),
                                ASN1_STRING_length(name->d.dNSName));
            break;
        case GEN_EMAIL:
            used = append_entry(buffer, size, used, "email:", ASN1_STRING_get0_data(name->d.rfc822Name),
                                ASN1_STRING_length(name->d.rfc822Name));
            break;
        case GEN_URI:
            used = append_entry(buffer, size, used, "URI:",
                                ASN1_STRING_get0_data(name->d.uniformResourceIdentifier),
                                ASN1_STRING_length(name->d.uniformResourceIdentifier));
            break;
        case GEN_IPADD: {
            char text[INET6_ADDRSTRLEN];
            int length = ASN1_STRING_length(name->d.iPAddress);
            const unsigned char *bytes = ASN1_STRING_get0_data(name->d.iPAddress);
            int family = length == 4 ? AF_INET : (length == 16 ? AF_INET6 : 0);
            if (family != 0 && inet_ntop(family, bytes, text, sizeof text) != NULL) {
                used = append_entry(buffer, size, used, "IP:", (const unsigned char *)text, (int)strlen(text));
            }
            break;
        }
        default:
            break;
        }
    }
    GENERAL_NAMES_free(names);
    return (int)used;
}

int switchboard_X509_spki_sha256(X509 *cert, unsigned char out[32]) {
    if (cert == NULL) return 0;
    unsigned char *der = NULL;
    int length = i2d_X509_PUBKEY(X509_get_X509_PUBKEY(cert), &der);
    if (length <= 0 || der == NULL) return 0;
    unsigned int digestLength = 0;
    int ok = EVP_Digest(der, (size_t)length, out, &digestLength, EVP_sha256(), NULL);
    OPENSSL_free(der);
    return ok == 1 && digestLength == 32;
}

int switchboard_cert_chain_count(STACK_OF(X509) *chain) {
    return chain == NULL ? 0 : sk_X509_num(chain);
}

X509 *switchboard_cert_chain_at(STACK_OF(X509) *chain, int index) {
    return sk_X509_value(chain, index);
}
