package bootstrap

// The secrets users give gocl (the rendezvous secret, the TCP status
// token) key an HMAC challenge, so whoever sees one handshake can try
// guesses offline: each must carry at least 128 bits. The rule can only
// judge the spelling: 32 characters (16 random bytes in hex; base64
// carries more) of which at least 10 differ. python/gocl/status.py holds
// the same rule for the status client.
const (
	MinSecretLen      = 32
	MinSecretDistinct = 10
)

// MakeSecret is the command that prints a strong secret.
const MakeSecret = `python -c 'import secrets; print(secrets.token_urlsafe(32))'`

// SecretStrength counts a secret's characters and its different ones, and
// says whether it is strong enough.
func SecretStrength(s string) (chars, distinct int, ok bool) {
	seen := map[rune]bool{}
	for _, r := range s {
		seen[r] = true
		chars++
	}
	return chars, len(seen), chars >= MinSecretLen && len(seen) >= MinSecretDistinct
}
