#ifndef SWITCHBOARD_COPENSSL_SHIM_H
#define SWITCHBOARD_COPENSSL_SHIM_H
#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/x509v3.h>
#include <openssl/bio.h>
#endif
