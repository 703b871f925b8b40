#!/usr/bin/env bash
# Writes the test certificates of tests/transport/tls.rs (kept in the repository; run again
# only to replace them): a certificate authority, a server certificate it signed for
# 127.0.0.1 and localhost, a client certificate it signed, and another authority that signed
# nothing here. ECDSA P-256 keys, valid for 100 years.
set -euo pipefail
cd "$(dirname "$0")"
days=36500
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
authority() {
  key "$1.key"
  openssl req -x509 -new -key "$1.key" -days $days -subj "/CN=$2" \
    -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
    -out "$1.pem"
}
signed() { # name subject extensions
  key "$1.key"
  openssl req -new -key "$1.key" -subj "/CN=$2" -out "$1.csr"
  printf '%s\n' "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days $days \
    -extfile "$1.ext" -out "$1.pem" 2>/dev/null
  rm "$1.csr" "$1.ext"
}
authority ca "pagent test authority"
authority other-ca "another test authority"
signed server "pagent test server" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost"
signed client "pagent test client" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature
extendedKeyUsage=clientAuth"
rm -f ca.srl ca.key other-ca.key
