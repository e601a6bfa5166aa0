package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// operatorTokenFile, in --root-dir, holds the token that POST
// /v1/claims/delete-now takes: the status endpoint on TCP is open to every
// local user, and reading a file of mode 0600 in the agent's root is what
// shows that a request comes from root (or the agent's own user). A new
// token is drawn at every start.
const operatorTokenFile = "operator-token"

// writeOperatorToken draws a token and writes it to root's
// operatorTokenFile, replacing the last start's.
func writeOperatorToken(root string) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("operator token: %w", err)
	}
	token := hex.EncodeToString(b)
	if err := writeFileAtomic(filepath.Join(root, operatorTokenFile), []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("operator token: %w", err)
	}
	return token, nil
}

// readOperatorToken reads the running agent's token from root.
func readOperatorToken(root string) (string, error) {
	path := filepath.Join(root, operatorTokenFile)
	b, err := os.ReadFile(path) //nolint:gosec // G304: --root-dir's own file
	switch {
	case os.IsPermission(err):
		return "", fmt.Errorf("cannot read %s: run as root (deleting data is root's to ask): %w", path, err)
	case os.IsNotExist(err):
		return "", fmt.Errorf("no %s: is --root-dir the agent's, and does the agent run with --manifests (a version that has delete-now)? %w", path, err)
	case err != nil:
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return strings.TrimSpace(string(b)), nil
}
