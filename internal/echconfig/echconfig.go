// Package echconfig builds an ECHConfigList (RFC 9849): enough for
// crypto/tls to send an Encrypted Client Hello. The probe sends one to
// prove the egress proxy refuses it, and the proxy's tests do the same.
package echconfig

import (
	"crypto/ecdh"
	"crypto/rand"
	"encoding/binary"
)

// Extension is the encrypted_client_hello extension's code point.
const Extension = 0xfe0d

// List returns an ECHConfigList of one X25519 config with publicName and
// a fresh key (no one can decrypt the inner hello: it only has to be sent).
func List(publicName string) ([]byte, error) {
	key, err := ecdh.X25519().GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	pub := key.PublicKey().Bytes()
	var c []byte
	c = append(c, 1)                             // config_id
	c = binary.BigEndian.AppendUint16(c, 0x0020) // KEM: DHKEM(X25519, HKDF-SHA256)
	c = binary.BigEndian.AppendUint16(c, uint16(len(pub)))
	c = append(c, pub...)
	c = binary.BigEndian.AppendUint16(c, 4)      // cipher suites
	c = binary.BigEndian.AppendUint16(c, 0x0001) // HKDF-SHA256
	c = binary.BigEndian.AppendUint16(c, 0x0001) // AES-128-GCM
	c = append(c, 0)                             // maximum_name_length
	c = append(c, byte(len(publicName)))
	c = append(c, publicName...)
	c = binary.BigEndian.AppendUint16(c, 0) // extensions
	var cfg []byte
	cfg = binary.BigEndian.AppendUint16(cfg, Extension)
	cfg = binary.BigEndian.AppendUint16(cfg, uint16(len(c)))
	cfg = append(cfg, c...)
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(cfg))), cfg...), nil
}
