#!/usr/bin/env bash
# Throwaway certificates for the interop suite's TLS checks, made with the openssl CLI.
#
#   tests/interop/tls_certs.sh DIR [NODES]      # NODES: how many node certificates (default 3)
#
# Writes into DIR (keys are unencrypted PKCS#8, "BEGIN PRIVATE KEY"; every leaf certificate has
# subjectAltName IP:127.0.0.1, DNS:localhost and is good for both serverAuth and clientAuth):
#   ca.pem                   the suite's CA certificate (the truststore of nodes and tool)
#   node1.pem .. nodeN.pem   a node's key + its certificate + the CA (Kafka's PEM keystore file)
#   client.pem               the tool's key + certificate + CA
#   client.properties        a --command-config for Kafka's tools: SSL with client.pem
#   rogue-ca.pem             a second CA that nobody trusts
#   rogue-client.pem         a client key + certificate signed by the rogue CA
#   rogue-client.properties  a --command-config presenting rogue-client.pem (it trusts ca.pem)
#   nocert-client.properties a --command-config that trusts ca.pem but presents no certificate
# RSA 2048 and SHA-256 throughout: what every TLS stack (JSSE, rustls, OpenSSL) accepts.
set -euo pipefail

DIR=${1:?usage: tls_certs.sh DIR [NODES]}
NODES=${2:-3}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
TMP=$(mktemp -d "$DIR/.tmp.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

key() { openssl genpkey -algorithm RSA -pkeyopt rsa_keygen_bits:2048 -out "$1" 2>/dev/null; }

# ca NAME CN: a self-signed CA certificate NAME.pem, its key kept in $TMP.
ca() {
  key "$TMP/$1.key"
  openssl req -x509 -new -key "$TMP/$1.key" -sha256 -days 30 -subj "/O=ringraft interop/CN=$2" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" \
    -addext "subjectKeyIdentifier=hash" -out "$DIR/$1.pem"
}

# leaf NAME CN CA: NAME.pem = key + certificate signed by CA + CA's certificate.
leaf() {
  local name=$1 cn=$2 ca=$3
  key "$TMP/$name.key"
  openssl req -new -key "$TMP/$name.key" -subj "/O=ringraft interop/CN=$cn" -out "$TMP/$name.csr"
  cat > "$TMP/$name.ext" <<EXT
basicConstraints=critical,CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth,clientAuth
subjectAltName=IP:127.0.0.1,DNS:localhost
subjectKeyIdentifier=hash
authorityKeyIdentifier=keyid
EXT
  openssl x509 -req -in "$TMP/$name.csr" -CA "$DIR/$ca.pem" -CAkey "$TMP/$ca.key" \
    -CAserial "$TMP/$ca.srl" -CAcreateserial -sha256 -days 30 -extfile "$TMP/$name.ext" \
    -out "$TMP/$name.crt" 2>/dev/null
  cat "$TMP/$name.key" "$TMP/$name.crt" "$DIR/$ca.pem" > "$DIR/$name.pem"
  chmod 600 "$DIR/$name.pem"
}

ca ca "ringraft interop CA"
for i in $(seq "$NODES"); do leaf "node$i" "node$i" ca; done
leaf client "kafka-metadata-quorum" ca
ca rogue-ca "untrusted CA"
leaf rogue-client "rogue client" rogue-ca

client_properties() { # client_properties KEYSTORE|"": a --command-config for Kafka's tools
  echo "security.protocol=SSL"
  [ -n "$1" ] && printf 'ssl.keystore.type=PEM\nssl.keystore.location=%s\n' "$1"
  printf 'ssl.truststore.type=PEM\nssl.truststore.location=%s\n' "$DIR/ca.pem"
}
client_properties "$DIR/client.pem" > "$DIR/client.properties"
client_properties "$DIR/rogue-client.pem" > "$DIR/rogue-client.properties"
client_properties "" > "$DIR/nocert-client.properties"

# What was made must hold together: every leaf verifies against its own CA, for 127.0.0.1.
for i in $(seq "$NODES"); do
  openssl verify -CAfile "$DIR/ca.pem" -verify_ip 127.0.0.1 -purpose sslserver "$DIR/node$i.pem" >/dev/null
done
openssl verify -CAfile "$DIR/ca.pem" -purpose sslclient "$DIR/client.pem" >/dev/null
openssl verify -CAfile "$DIR/rogue-ca.pem" -purpose sslclient "$DIR/rogue-client.pem" >/dev/null
! openssl verify -CAfile "$DIR/ca.pem" "$DIR/rogue-client.pem" >/dev/null 2>&1
echo "certificates in $DIR: ca.pem, node1..node$NODES.pem, client.pem, rogue-ca.pem, rogue-client.pem"
