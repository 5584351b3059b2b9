package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/seqflow/seqflow/internal/auth"
)

// runToken mints a development bearer token for producer-gw:
//
//	seqflow token --user u1 --device d1 [--platform ios] [--ttl 24h]
//
// It signs with GATEWAY_JWT_HS256_SECRET, or with the Ed25519 key in
// GATEWAY_DEV_JWT_ED25519_PRIVATE_KEY (flags override both). --new-key
// prints a fresh Ed25519 key pair for the two environment variables.
func runToken(_ context.Context, args []string) error {
	return token(os.Stdout, args)
}

func token(out io.Writer, args []string) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	user := fs.String("user", "", "user ID, the token's sub (required)")
	device := fs.String("device", "", "device ID, the token's device_id (required)")
	ttl := fs.Duration("ttl", 24*time.Hour, "lifetime")
	platform := fs.String("platform", "", "the device's platform claim (ios, android, web, desktop, ...): the login policy one_per_platform and the device list use it; default none")
	secret := secretFlag(fs, "secret", "GATEWAY_JWT_HS256_SECRET", "HS256 secret (default GATEWAY_JWT_HS256_SECRET)")
	edKey := secretFlag(fs, "ed25519-private-key", "GATEWAY_DEV_JWT_ED25519_PRIVATE_KEY", "Ed25519 private key, PEM or base64 (default GATEWAY_DEV_JWT_ED25519_PRIVATE_KEY)")
	aud := fs.String("aud", os.Getenv("GATEWAY_JWT_AUDIENCE"), "the token's aud, what gateways with GATEWAY_JWT_AUDIENCE ask for")
	iss := fs.String("iss", os.Getenv("GATEWAY_JWT_ISSUER"), "the token's iss, what gateways with GATEWAY_JWT_ISSUER ask for")
	newKey := fs.Bool("new-key", false, "print a new Ed25519 key pair and exit")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *newKey {
		pub, priv, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "GATEWAY_JWT_ED25519_PUBLIC_KEY=%s\nGATEWAY_DEV_JWT_ED25519_PRIVATE_KEY=%s\n",
			base64.StdEncoding.EncodeToString(pub), base64.StdEncoding.EncodeToString(priv.Seed()))
		return nil
	}
	if *user == "" || *device == "" {
		return errors.New("--user and --device are required")
	}
	var s *auth.Signer
	var err error
	switch {
	case *edKey != "":
		var k ed25519.PrivateKey
		if k, err = auth.ParseEd25519PrivateKey(*edKey); err == nil {
			s, err = auth.NewEd25519Signer(k)
		}
	case *secret != "":
		s, err = auth.NewHS256Signer([]byte(*secret))
	default:
		return errors.New("no signing key: set GATEWAY_JWT_HS256_SECRET (or --secret), or --ed25519-private-key")
	}
	if err != nil {
		return err
	}
	s.Audience, s.Issuer = *aud, *iss
	tok, err := s.MintPlatform(*user, *device, *platform, *ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(out, tok)
	return nil
}
