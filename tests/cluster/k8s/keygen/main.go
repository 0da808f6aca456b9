// Command keygen writes an RSA key pair for kube-apiserver's service-account
// token signing. up.sh uses it only when openssl is not installed.
//
//	go run ./keygen PRIVATE_KEY_PEM PUBLIC_KEY_PEM
package main

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: keygen PRIVATE_KEY_PEM PUBLIC_KEY_PEM")
		os.Exit(2)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		fail(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		fail(err)
	}
	write(os.Args[1], "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key), 0o600)
	write(os.Args[2], "PUBLIC KEY", pub, 0o644)
}

func write(path, typ string, der []byte, mode os.FileMode) {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "keygen:", err)
	os.Exit(1)
}
